"""IAM proven by use: every AWS call each component makes on the local stack, against the policy CDK synthesizes.

One stack records every call by whose key signed it (``StackSettings(record_calls=True)``) while the test drives
every component as a user would: rollouts that succeed, fail, time out, are cancelled, carry a payload too big
for a message and for the runtime; an unreadable dispatch message; a second trainer attaching; ``rollouts status``,
``results``, ``sessions --queued`` and ``doctor`` with a canary. The CDK app is synthesized meanwhile, for the
local account and region. Then both directions: every recorded call is allowed by its role (and not denied by
the bucket's or queue's policy), and every grant (action and resource of an ``Allow`` statement) allowed some
call, or is listed in :data:`NOT_RECORDED` with why the local twin cannot show it.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from concurrent.futures import CancelledError
from pathlib import Path
from typing import Any, NamedTuple

import boto3
import httpx
import pytest
from e2e_support import EMULATOR_MAX_PAYLOAD, EXP, run_trainer_process, scripted_stack, serving, wait_until
from iam_support import start_synth, synthesized

from local_stack.aws_requests import secret_arn
from local_stack.call_log import RecordedCall
from local_stack.deployed_policies import Audit, DeployedPolicies, audit
from local_stack.iam_policy import Decision, Request, evaluate
from local_stack.moto_server import AWS_SERVICE_COMPONENTS, LOCAL_ACCOUNT_ID, LOCAL_REGION, credentials
from local_stack.stack import LocalStack, runtime_arn
from rollout_contract import Status
from rollout_contract.budgets import SESSION_BUDGET_ID, held_attribute
from rollout_contract.credentials import ExperimentSecret
from rollout_contract.messages import CancelRequest
from rollout_contract.resources import BUDGET_PARTITION_KEY, BUDGET_TABLE, LOCAL_RESULTS_BUCKET, results_bucket_name
from trainer_client import PollSettings, RolloutClient
from trainer_client._cli import main as rollouts

pytestmark = pytest.mark.e2e

COMPONENTS = ("dispatcher", "finisher", "sweeper", "trainer", "agent")
RESULT_WAIT_S = 60
#: Fewer session slots than the rollouts submitted at once, so dispatches wait for one.
SESSION_BUDGET = 2
_LAMBDA_LOGS = (
    "the Lambda runtime writes the function's output to its log group; the handler never calls CloudWatch Logs"
)
_ACR = "ACR itself uses the execution role for this; the agent's code never calls it"
#: Grants no recorded call uses, by (component, action), with why: what AWS does with the role rather than our code,
#: and the one race the local twin cannot stage on demand.
NOT_RECORDED: dict[tuple[str, str], str] = {
    ("dispatcher", "bedrock-agentcore:StopRuntimeSession"): "stops a session whose rollout ended (cancelled, timed "
    "out) while its invoke was in flight (lambdas/dispatcher.py _invoke, tested in tests/lambdas/test_dispatcher.py): "
    "the finisher must stop the session and finish the rollout before the invoke answers, and the emulator's "
    "StopRuntimeSession waits for a starting session, so locally the invoke answers first",
    **{
        (function, action): _LAMBDA_LOGS
        for function in ("dispatcher", "finisher", "sweeper")
        for action in ("logs:CreateLogStream", "logs:PutLogEvents")
    },
    **{
        (
            function,
            "sqs:GetQueueUrl",
        ): "CDK's SqsEventSource grants the queue's consume actions (grantConsumeMessages); "
        "Lambda's poller is given the queue's ARN and never looks up its URL"
        for function in ("dispatcher", "finisher")
    },
    **{
        ("agent", action): f"{_ACR}: the agent's stdout goes to the runtime's log groups"
        for action in (
            "logs:CreateLogGroup",
            "logs:DescribeLogStreams",
            "logs:DescribeLogGroups",
            "logs:CreateLogStream",
            "logs:PutLogEvents",
        )
    },
    **{
        ("agent", action): f"{_ACR}: traces of the runtime's sessions"
        for action in (
            "xray:PutTraceSegments",
            "xray:PutTelemetryRecords",
            "xray:GetSamplingRules",
            "xray:GetSamplingTargets",
        )
    },
    ("agent", "cloudwatch:PutMetricData"): f"{_ACR}: its metrics in the bedrock-agentcore namespace",
    **{
        ("trainer", action): "rollouts doctor's quotas line (D98) reads Service Quotas, which the local stack does not "
        "serve (the line says so and uses ACR's published defaults)"
        for action in ("servicequotas:ListAWSDefaultServiceQuotas", "servicequotas:ListServiceQuotas")
    },
    **{
        ("agent", action): f"{_ACR}: the image pull (the local emulator runs the agent from source)"
        for action in (
            "ecr:BatchCheckLayerAvailability",
            "ecr:GetDownloadUrlForLayer",
            "ecr:BatchGetImage",
            "ecr:GetAuthorizationToken",
        )
    },
    **{
        ("agent", action): f"{_ACR}: workload access tokens for the agent's identity (the agents here call no "
        "AgentCore Identity provider)"
        for action in (
            "bedrock-agentcore:GetWorkloadAccessToken",
            "bedrock-agentcore:GetWorkloadAccessTokenForJWT",
            "bedrock-agentcore:GetWorkloadAccessTokenForUserId",
        )
    },
}


class Recorded(NamedTuple):
    calls: list[RecordedCall]
    policies: DeployedPolicies
    roles: dict[str, str]
    audit: Audit


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    """Every component driven once on a recording stack, the CDK app synthesized meanwhile, and the audit."""
    root = tmp_path_factory.mktemp("iam")
    synth = start_synth(root / "cdk", EXP)
    stack = scripted_stack(
        root / "stack",
        EXP,
        gateway=True,  # the trainer's role runs it: it reads the experiment's gateway keys (D100)
        record_calls=True,
        session_budget=SESSION_BUDGET,
        emulator_options={"max_payload_bytes": EMULATOR_MAX_PAYLOAD},
    )
    try:
        with serving(stack) as running:
            _drive(running, root)
    except BaseException:
        synth.kill()
        synth.communicate()
        raise
    calls = stack.recorded_calls()
    templates, roles = synthesized(synth, root / "cdk")
    policies = DeployedPolicies.from_templates(
        templates,
        region=LOCAL_REGION,
        account=LOCAL_ACCOUNT_ID,
        runtime_arn=runtime_arn(EXP),
        renames={results_bucket_name(LOCAL_ACCOUNT_ID, LOCAL_REGION): LOCAL_RESULTS_BUCKET},
    )
    result = audit(calls, policies, roles, region=LOCAL_REGION, account=LOCAL_ACCOUNT_ID)
    print(f"{len(calls)} calls recorded\n{result.summary()}")
    return Recorded(calls, policies, roles, result)


def _slots_held() -> int:
    item = (
        _admin("dynamodb")
        .get_item(
            TableName=BUDGET_TABLE.name, Key={BUDGET_PARTITION_KEY: {"S": SESSION_BUDGET_ID}}, ConsistentRead=True
        )
        .get("Item", {})
    )
    return int(item.get(held_attribute(EXP), {"N": "0"})["N"])


def _finisher_names(stack: LocalStack) -> set[str]:
    """The local workers that run the experiment's finisher (``worker-<exp>``, ``worker-<exp>-finisher-<i>``)."""
    return {
        name for name in stack.worker_names() if name == f"worker-{EXP}" or name.startswith(f"worker-{EXP}-finisher")
    }


def _queued(queue_url: str) -> int:
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    attributes = _admin("sqs").get_queue_attributes(QueueUrl=queue_url, AttributeNames=names)["Attributes"]
    return sum(int(attributes[name]) for name in names)


def _admin(service: str) -> Any:
    """A client of the test itself (the deploying identity), whose calls are no component's."""
    keys = credentials("admin")
    return boto3.client(
        service, aws_access_key_id=keys["AWS_ACCESS_KEY_ID"], aws_secret_access_key=keys["AWS_SECRET_ACCESS_KEY"]
    )


def _session_started(stack: LocalStack, session_id: str) -> bool:
    sessions = httpx.get(f"{stack.emulator_url}/_admin/sessions", timeout=5).json()["sessions"]
    return any(session["session_id"] == session_id for session in sessions)


def _drive(stack: LocalStack, root: Path) -> None:
    """Use every component the way a trainer and an operator would, each path that makes a call of its own."""
    descriptor = stack.descriptors[EXP]
    dispatch_url = descriptor.dispatch_queue_url
    canary = root / "canary.json"
    canary.write_text(json.dumps({"action": "succeed", "reward": 1.0}))
    assert rollouts(["doctor", EXP, "--canary", str(canary)]) == 0
    # Another trainer that submitted and went away without closing (its lease stays alive): its event is handed back.
    elsewhere = run_trainer_process(stack, EXP, "elsewhere", "1", "--no-wait", "--sleep", "3")
    assert elsewhere.returncode == 0, elsewhere.stderr[-2000:]
    # The receive it had open when it exited (trainer_process polls 1 s at a time) still takes the next event to come
    # (moto's does; an SQS receive whose answer is lost may too; in one CI run ``ok``'s), which then stays invisible
    # for the completion queue's 60 s visibility timeout: let that receive end before this test's rollouts finish.
    time.sleep(1.5)
    poll = PollSettings(wait_time_s=1, deadline_grace_s=1)  # the crash's future is checked before its event
    with RolloutClient.for_experiment(EXP, poll=poll) as client:
        # More rollouts than session slots: dispatches wait for a slot (the count is read).
        ok = client.invoke({"action": "succeed", "reward": 0.5}, input_id="ok", timeout=60)
        raises = client.invoke({"action": "raise"}, input_id="raises", timeout=60)
        crashes = client.invoke({"action": "crash"}, input_id="crashes", timeout=3)
        too_big = client.invoke({"action": "succeed", "blob": "x" * (EMULATOR_MAX_PAYLOAD + 1024)}, input_id="big")
        statuses = [f.result(timeout=RESULT_WAIT_S).status for f in (ok, raises, crashes, too_big)]
        assert statuses == [Status.SUCCEEDED, Status.AGENT_ERROR, Status.TIMED_OUT, Status.DISPATCH_FAILED]
        # A model call through the gateway with the trainer's key (the gateway checks it against both keys).
        assert client.probe_gateway() is not None
        # A rollout still waiting for a slot when its timeout and grace have passed: the deadline watch reads its
        # record (BatchGetItem) and waits on (the crash above is often ended and announced before its check).
        blockers = [
            client.invoke({"action": "succeed", "sleep_s": 10}, input_id=f"block-{i}", timeout=60)
            for i in range(SESSION_BUDGET)
        ]
        assert wait_until(lambda: _slots_held() == SESSION_BUDGET)
        waits = client.invoke({"action": "succeed"}, input_id="waits-for-a-slot", timeout=5)
        assert [f.result(timeout=RESULT_WAIT_S).status for f in (*blockers, waits)] == [Status.SUCCEEDED] * 3
        # A cancel that comes too late: the dispatcher's write loses to the stored result, which it reads.
        late_cancel = CancelRequest(exp_id=EXP, input_id="ok", session_id=ok.session_id, trainer=client.trainer_id)
        boto3.client("sqs").send_message(QueueUrl=dispatch_url, MessageBody=late_cancel.to_body())
        assert wait_until(lambda: _queued(dispatch_url) == 0)
        # Every runtime call throttled for 8 s from a session's start: its result comes 2 s in, the finisher's
        # stop is refused twice (its record retried 5 s, then 10 s later), so the sweeper ends the rollout past its
        # 5 s deadline: its timed_out loses to the stored result, which it reads; an invoke meanwhile is requeued
        # and redelivered. (The margins are seconds, not scheduling luck: this path must run every time.)
        stopped_late = client.invoke({"action": "succeed", "sleep_s": 2}, input_id="stop-throttled", timeout=5)
        assert wait_until(lambda: _session_started(stack, stopped_late.session_id))
        httpx.post(f"{stack.emulator_url}/_admin/throttle", json={"invoke_tps": 0.01, "seconds": 8}, timeout=5)
        started_late = client.invoke({"action": "succeed"}, input_id="start-throttled", timeout=60)
        assert [f.result(timeout=RESULT_WAIT_S).status for f in (stopped_late, started_late)] == [Status.SUCCEEDED] * 2
        # A result stored while the finisher is held up (its workers paused, as a slow or throttled Lambda): past
        # the 4 s deadline the sweeper's timed_out loses to the stored result, which it reads and finishes with
        # (since D90 an agent's result frees its slot before the stop, so the throttle above no longer gets here).
        assert wait_until(lambda: _slots_held() == 0, timeout_s=30)
        finishers = [process for process in stack.processes if process.name in _finisher_names(stack)]
        for process in finishers:
            os.killpg(process.pid, signal.SIGSTOP)
        try:
            held = client.invoke({"action": "succeed", "sleep_s": 1}, input_id="finisher-held", timeout=4)
            assert held.result(timeout=RESULT_WAIT_S).status is Status.SUCCEEDED
            assert wait_until(lambda: _slots_held() == 0, timeout_s=30)  # the sweeper ended it, finishers paused
        finally:
            for process in finishers:
                os.killpg(process.pid, signal.SIGCONT)
        # A cancel of a running rollout: the dispatcher ends it, the finisher stops its session.
        cancelled = client.invoke({"action": "succeed", "sleep_s": 60}, input_id="cancelled", timeout=120)
        assert wait_until(lambda: _session_started(stack, cancelled.session_id))
        assert cancelled.cancel()
        with pytest.raises(CancelledError):
            cancelled.result(timeout=1)
        # A second trainer attaching a stored result.
        with RolloutClient.for_experiment(EXP, poll=poll) as other:
            (attached,) = other.attach([ok.result_key])
            assert attached.result(timeout=RESULT_WAIT_S).status is Status.SUCCEEDED
    for command in (["status", EXP], ["results", EXP], ["sessions", EXP, "--queued"]):
        assert rollouts(command) == 0, command
    # An unreadable dispatch request (a trainer's, as this process's credentials are): the dispatcher dead-letters it.
    boto3.client("sqs").send_message(QueueUrl=dispatch_url, MessageBody="{not json")
    assert wait_until(lambda: _queued(descriptor.resources.dispatch_queue.dlq_url(dispatch_url)) == 1)
    assert wait_until(lambda: _slots_held() == 0, timeout_s=30)


def test_every_component_made_calls_under_its_own_key(recorded: Recorded) -> None:
    # GIVEN the recording of every component driven once
    # THEN each component signed calls with its own key, and nothing else but the test and the AWS services did
    assert all(recorded.audit.calls[component] > 0 for component in COMPONENTS), recorded.audit.calls
    others = Counter(call.component for call in recorded.calls if call.component not in COMPONENTS)
    assert set(others) <= {"admin", *AWS_SERVICE_COMPONENTS}, others


def test_every_recorded_call_is_allowed_by_its_components_role(recorded: Recorded) -> None:
    # GIVEN every call each component made, and the policies CDK synthesizes for its role
    # THEN each is allowed, and no bucket or queue policy denies it
    findings = [
        f"{f.component} {f.operation}: {f.authorization.action} on {f.resource or '?'} "
        f"with {dict(f.authorization.context)}: {f.why}"
        for f in recorded.audit.not_allowed
    ]
    assert not findings, "calls not allowed:\n" + "\n".join(findings)


def test_every_granted_action_is_used_or_explained(recorded: Recorded) -> None:
    # GIVEN every grant of every component's role (an action on a resource, by statement)
    # THEN each allowed some recorded call, or the action is one AWS uses on the role's behalf (NOT_RECORDED)
    unexplained = [
        f"{component}: {grant.action} on {grant.resource} ({grant.statement.source})"
        for component, grants in recorded.audit.unused.items()
        for grant in grants
        if (component, grant.action) not in NOT_RECORDED
    ]
    assert not unexplained, "grants no call used:\n" + "\n".join(unexplained)
    stale = [
        key
        for key in NOT_RECORDED
        if not any(
            (component, grant.action) == key for component, grants in recorded.audit.unused.items() for grant in grants
        )
    ]
    assert stale == [], "NOT_RECORDED names grants that calls do use, or that no longer exist"


def test_the_experiments_secrets_are_read_by_whom_they_are_granted_and_no_further(recorded: Recorded) -> None:
    # GIVEN the recorded Secrets Manager reads and the roles CDK synthesizes
    reads = {
        (call.component, authorization.resources[0].rpartition(":secret:")[2].removesuffix("-??????"))
        for call in recorded.calls
        for authorization in call.authorizations
        if authorization.action == "secretsmanager:GetSecretValue"
    }
    names = {secret: secret.secret_name(EXP) for secret in ExperimentSecret}
    # THEN the new grants were used: the functions that write results and the trainer read the key results are
    # proven with, the agent its model-call key, the trainer (and its gateway) the gateway's keys
    assert reads == {
        ("dispatcher", names[ExperimentSecret.RESULT_KEY]),
        ("sweeper", names[ExperimentSecret.RESULT_KEY]),
        ("trainer", names[ExperimentSecret.RESULT_KEY]),
        ("agent", names[ExperimentSecret.MODEL_KEY]),
        ("trainer", names[ExperimentSecret.MODEL_KEY]),
        ("trainer", names[ExperimentSecret.ADMIN_KEY]),
    }

    # AND the runtime role may read its own experiment's model-call key and nothing else: not the key results are
    # proven with (code in the session holding its credentials could sign a forged result), not the gateway's admin
    # key, and no secret of another experiment
    def agent_may_read(experiment: str, secret: ExperimentSecret) -> bool:
        arn, statements = recorded.policies.roles[recorded.roles["agent"]]
        resource = secret_arn(LOCAL_REGION, LOCAL_ACCOUNT_ID, secret.secret_name(experiment))
        request = Request(arn, "secretsmanager:GetSecretValue", resource, {}, frozenset())
        return evaluate(request, statements).decision is Decision.ALLOW

    assert agent_may_read(EXP, ExperimentSecret.MODEL_KEY)
    assert not agent_may_read(EXP, ExperimentSecret.RESULT_KEY)
    assert not agent_may_read(EXP, ExperimentSecret.ADMIN_KEY)
    assert not any(agent_may_read("another-experiment", secret) for secret in ExperimentSecret)
