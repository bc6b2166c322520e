"""Adopting a runtime the user already has: ``cdk deploy -c experiment=X -c runtime_arn=... -c runtime_role_arn=...``.

Synthesized with cdk-nag, with account and region set (what ``cdk deploy`` does with credentials), and without
(the stack then takes the runtime's own account and region).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Environment
from aws_cdk.assertions import Match, Template

from infra.app import adopted_environment, build_experiment
from infra.nag import add_nag_checks
from infra.settings import ContextError, experiment_settings
from rollout_contract.credentials import ExperimentSecret
from rollout_contract.keys import experiment_prefix
from rollout_contract.resources import ExperimentDescriptor, ExperimentResources, results_bucket_name
from tests.infra.conftest import SYNTH_TIMEOUT_S

pytestmark = [pytest.mark.cdk, pytest.mark.timeout(SYNTH_TIMEOUT_S)]

ACCOUNT, REGION = "123456789012", "us-west-2"
RUNTIME_ARN = f"arn:aws:bedrock-agentcore:{REGION}:{ACCOUNT}:runtime/strands_math_agent_rl-Ab12Cd34Ef"
ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/service-role/AmazonBedrockAgentCoreSDKRuntime-{REGION}-1a2b3c"
ADOPT = {"experiment": "gsm8k", "runtime_arn": RUNTIME_ARN, "runtime_role_arn": ROLE_ARN}


def _synth(tmp_path: Path, context: dict[str, str], env: Environment | None) -> tuple[Template, list[Any]]:
    app = App(outdir=str(tmp_path))
    add_nag_checks(app)
    settings = experiment_settings(context)
    stack = build_experiment(app, settings, env=adopted_environment(settings, env))
    assembly = app.synth()
    artifact = assembly.get_stack_by_name(stack.stack_name)
    return Template.from_json(artifact.template), artifact.messages


@pytest.fixture(scope="module")
def adopted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Template, list[Any]]:
    return _synth(tmp_path_factory.mktemp("adopt"), ADOPT, Environment(account=ACCOUNT, region=REGION))


def test_everything_but_the_runtime_is_built_around_the_existing_one(adopted: tuple[Template, list[Any]]) -> None:
    template, _ = adopted
    # THEN no runtime, execution role or log retention is created...
    assert template.find_resources("AWS::BedrockAgentCore::Runtime") == {}
    assert template.find_resources("Custom::LogRetention") == {}
    assert not any(
        "bedrock-agentcore.amazonaws.com" in json.dumps(role["Properties"]["AssumeRolePolicyDocument"])
        for role in template.find_resources("AWS::IAM::Role").values()
    )
    # ...but the queues, rule, functions, tables, dashboard and trainer role are
    names = ExperimentResources.for_experiment("gsm8k")
    template.resource_count_is("AWS::SQS::Queue", 6)
    template.has_resource_properties("AWS::Events::Rule", {"Name": names.result_rule_name})
    template.resource_count_is("AWS::Lambda::Function", 3)
    template.has_resource_properties("AWS::DynamoDB::Table", {"TableName": names.sessions_table.name})
    template.has_resource_properties("AWS::CloudWatch::Dashboard", {"DashboardName": names.dashboard_name(REGION)})
    assert {"TrainerRoleArn", "DashboardName", "RuntimeArn"} <= set(template.find_outputs("*"))
    assert template.find_outputs("RuntimeArn")["RuntimeArn"]["Value"] == RUNTIME_ARN


def test_the_functions_and_the_descriptor_name_the_adopted_runtime(adopted: tuple[Template, list[Any]]) -> None:
    template, _ = adopted
    functions = template.find_resources("AWS::Lambda::Function")
    env_var = "ROLLOUTS_RUNTIME_ARN"
    assert {f["Properties"]["Environment"]["Variables"][env_var] for f in functions.values()} == {RUNTIME_ARN}
    (parameter,) = template.find_resources("AWS::SSM::Parameter").values()
    descriptor = ExperimentDescriptor.model_validate_json(_joined(parameter["Properties"]["Value"]))
    assert descriptor.runtime_arn == RUNTIME_ARN
    # AND the dispatcher may invoke it, the finisher and sweeper stop its sessions
    invoke = _statements_with(template, "bedrock-agentcore:InvokeAgentRuntime")
    assert invoke and all(s["Resource"] == [RUNTIME_ARN, f"{RUNTIME_ARN}/*"] for s in invoke)
    stop = _statements_with(template, "bedrock-agentcore:StopRuntimeSession")
    assert stop and all(s["Resource"] == [RUNTIME_ARN, f"{RUNTIME_ARN}/*"] for s in stop)


def _model_key_read(template: Template) -> dict[str, Any]:
    """The statement that lets the runtime read its experiment's model-call key, the one secret it may read (D100)."""
    (secret,) = template.find_resources(
        "AWS::SecretsManager::Secret", {"Properties": {"Name": ExperimentSecret.MODEL_KEY.secret_name("gsm8k")}}
    )
    return {"Action": "secretsmanager:GetSecretValue", "Effect": "Allow", "Resource": {"Ref": secret}}


def test_the_runtimes_role_gets_the_result_write_under_the_experiments_prefix_and_its_model_key_only(
    adopted: tuple[Template, list[Any]],
) -> None:
    template, messages = adopted
    # THEN one policy of the stack is attached to the runtime's existing role (by name): the result write, and the
    # read of the model-call key it sends the gateway
    bucket = results_bucket_name(ACCOUNT, REGION)
    attached = [
        p["Properties"]
        for p in template.find_resources("AWS::IAM::Policy").values()
        if p["Properties"].get("Roles") == [ROLE_ARN.rpartition("/")[2]]
    ]
    assert len(attached) == 1
    assert _rendered(attached[0]["PolicyDocument"]["Statement"]) == [
        {
            "Action": "s3:PutObject",
            "Condition": {"StringEquals": {"s3:if-none-match": "*"}},
            "Effect": "Allow",
            "Resource": f"arn:aws:s3:::{bucket}/{experiment_prefix('gsm8k')}*",
        },
        _model_key_read(template),
    ]
    # AND synth says so, naming the role and the statement
    info = [m.entry.data for m in messages if "adopting runtime" in str(m.entry.data)]
    assert len(info) == 1 and ROLE_ARN in info[0] and "s3:PutObject" in info[0]
    assert f"secretsmanager:GetSecretValue on {ExperimentSecret.MODEL_KEY.secret_name('gsm8k')}" in info[0]


def test_a_runtime_still_running_arts_image_gets_the_result_write_without_the_condition(tmp_path: Path) -> None:
    # GIVEN an adopted runtime that still runs ART 0.2.0's image (its put_object sends no If-None-Match), deployed
    # as the README's "Migrating from ART" says: -c first_writer_wins=false
    context = {**ADOPT, "first_writer_wins": "false"}
    template, messages = _synth(tmp_path, context, Environment(account=ACCOUNT, region=REGION))

    # THEN the statement on its role lets it put results under the experiment's prefix with no condition, and
    # synth prints that statement
    bucket = results_bucket_name(ACCOUNT, REGION)
    (attached,) = [
        p["Properties"]
        for p in template.find_resources("AWS::IAM::Policy").values()
        if p["Properties"].get("Roles") == [ROLE_ARN.rpartition("/")[2]]
    ]
    resource = f"arn:aws:s3:::{bucket}/{experiment_prefix('gsm8k')}*"
    assert _rendered(attached["PolicyDocument"]["Statement"]) == [
        {"Action": "s3:PutObject", "Effect": "Allow", "Resource": resource},
        _model_key_read(template),
    ]
    (info,) = [str(m.entry.data) for m in messages if "adopting runtime" in str(m.entry.data)]
    assert "if-none-match" not in info


def test_without_credentials_the_stack_takes_the_runtimes_account_and_region(tmp_path: Path) -> None:
    template, _ = _synth(tmp_path, ADOPT, None)
    template.has_resource_properties(
        "AWS::IAM::Policy",
        Match.object_like({"Roles": [ROLE_ARN.rpartition("/")[2]]}),
    )
    assert f"arn:aws:s3:::{results_bucket_name(ACCOUNT, REGION)}/gsm8k/*" in json.dumps(_rendered(template.to_json()))


def _rendered(node: Any) -> Any:
    """``node`` with ``Fn::Join`` joined and the partition filled in (``aws``)."""
    if isinstance(node, list):
        return [_rendered(item) for item in node]
    if not isinstance(node, dict):
        return node
    if node == {"Ref": "AWS::Partition"}:
        return "aws"
    if set(node) == {"Fn::Join"}:
        separator, parts = node["Fn::Join"]
        return separator.join(str(_rendered(part)) for part in parts)
    return {key: _rendered(value) for key, value in node.items()}


def _joined(value: Any) -> str:
    if isinstance(value, str):
        return value
    separator, parts = value["Fn::Join"]
    return separator.join(part if isinstance(part, str) else "X" for part in parts)


def _statements_with(template: Template, action: str) -> list[dict[str, Any]]:
    found = []
    for policy in template.find_resources("AWS::IAM::Policy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            if action in actions:
                found.append(statement)
    return found


# --- the flags (no synth) ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        ({"runtime_role_arn": None}, r"needs -c runtime_role_arn.*get-agent-runtime --agent-runtime-id "
         r"strands_math_agent_rl-Ab12Cd34Ef"),
        ({"runtime_arn": "arn:aws:bedrock-agentcore:us-west-2:123456789012:agent/x"}, "not an AgentCore runtime ARN"),
        ({"runtime_role_arn": "arn:aws:iam::999999999999:role/r"}, "in account 999999999999, the runtime in"),
        ({"image_tag": "v1", "vpc_id": "vpc-0abc1234def567890"}, "-c image_tag, -c vpc_id configure a runtime"),
    ],
)  # fmt: skip
def test_adoption_flags_that_cannot_work_are_refused_naming_the_fix(extra: dict[str, str | None], said: str) -> None:
    with pytest.raises(ContextError, match=said):
        experiment_settings({**ADOPT, **extra})


def test_a_deploy_to_another_region_than_the_runtimes_is_refused() -> None:
    settings = experiment_settings(ADOPT)
    with pytest.raises(ContextError, match="region us-west-2, but this deploy targets 123456789012, eu-west-1"):
        adopted_environment(settings, Environment(account=ACCOUNT, region="eu-west-1"))
