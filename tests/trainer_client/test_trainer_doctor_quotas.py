"""`rollouts doctor`'s quotas line: the account's AgentCore quotas against the experiment's budgets, what K buys."""

from __future__ import annotations

import boto3
from botocore.stub import Stubber

from rollout_contract import ExperimentDescriptor
from trainer_client.doctor import Experiment, check_quotas

REGION = "us-east-1"


def experiment(*, endpoints: int = 1, local: bool = False) -> Experiment:
    descriptor = ExperimentDescriptor(
        exp_id="quotas",
        region=REGION,
        results_bucket="bucket",
        dispatch_queue_url="https://sqs/dispatch",
        completion_queue_url="https://sqs/completion",
        sessions_table="sessions",
        budget_table="budgets",
        runtime_arn=f"arn:aws:bedrock-agentcore:{REGION}:123456789012:runtime/agent-quotas",
        runtime_endpoints=endpoints,
        tps_limit=25.0,
        session_budget=900,
        endpoints={"sqs": "http://127.0.0.1:1"} if local else {},
    )
    return Experiment(descriptor, {"service-quotas": boto3.client("service-quotas", region_name=REGION)})


def stubbed(exp: Experiment, *quotas: dict[str, object]) -> Stubber:
    stub = Stubber(exp.clients["service-quotas"])
    stub.add_response("list_aws_default_service_quotas", {"Quotas": list(quotas)})
    stub.add_response("list_service_quotas", {"Quotas": []})
    return stub


INVOKES = {"QuotaName": "InvokeAgentRuntime requests per second", "QuotaCode": "L-2", "Value": 25.0}


def test_listed_quotas_pass_saying_what_the_experiments_endpoints_buy() -> None:
    # GIVEN an experiment of 4 endpoints and an account of 25 invokes/s per endpoint and 1,000 sessions
    exp = experiment(endpoints=4)
    sessions = {"QuotaName": "Active session workloads per account", "QuotaCode": "L-1", "Value": 1000.0}
    with stubbed(exp, INVOKES, sessions):
        result = check_quotas(exp)
    # THEN the line passes and says what its 4 endpoints buy and when the session budget binds instead
    assert result.ok and not result.warn
    assert "endpoints=4 dispatches up to 50 rollouts/s, each endpoint adding 12.5/s" in result.detail
    assert "session budget 900 (Active session workloads per account 1000) binds first" in result.detail
    assert "longer than 18 s" in result.detail


def test_a_quota_below_the_budget_fails_naming_both() -> None:
    exp = experiment()
    sessions = {"QuotaName": "Active session workloads per account", "QuotaCode": "L-1", "Value": 500.0}
    with stubbed(exp, INVOKES, sessions):
        result = check_quotas(exp)
    assert not result.ok
    assert result.detail == "Active session workloads per account is 500, the budget 900"
    assert "Service Quotas console" in result.fix


def test_unlisted_quotas_warn_and_still_say_what_k_buys_at_the_default() -> None:
    exp = experiment(endpoints=2)
    with stubbed(exp):
        result = check_quotas(exp)
    assert result.ok and result.warn
    assert result.detail.startswith("quota unknown (not listed in us-east-1): ACR's published default: 25/s")
    assert "endpoints=2 dispatches up to 25 rollouts/s" in result.detail
    assert result.fix == "check the invoke and active session quota on the Service Quotas page"


def test_the_local_stack_calls_no_service_quotas_and_says_the_quota_is_unknown() -> None:
    exp = experiment(local=True)
    with Stubber(exp.clients["service-quotas"]):  # any call would fail: none is stubbed
        result = check_quotas(exp)
    assert result.ok and not result.warn
    assert result.detail.startswith("quota unknown (the local stack has no Service Quotas)")


def test_credentials_that_may_not_read_service_quotas_warn_instead_of_failing() -> None:
    exp = experiment()
    with Stubber(exp.clients["service-quotas"]) as stub:
        stub.add_client_error("list_aws_default_service_quotas", "AccessDeniedException", http_status_code=403)
        result = check_quotas(exp)
    assert result.ok and result.warn
    assert result.detail.startswith("quota unknown (these credentials may not read Service Quotas")
