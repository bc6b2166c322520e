"""What a first real deploy needs, proven offline on the synthesized templates (issue 10's blockers).

Each test reproduces a condition of a real account: environment-bound synth, the longest experiment id,
two experiments whose names are prefixes of each other, one experiment in two regions, ``cdk destroy``
after the README's steps, queue and log settings, and cfn-lint on every template.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Environment
from aws_cdk.assertions import Annotations, Match, Template

from infra.app import build_experiment
from infra.nag import add_nag_checks
from infra.runtime import RUNTIME_LOG_GROUP_PREFIX
from infra.settings import ContextError, experiment_settings
from rollout_contract.naming import EXPERIMENT_MAX_LENGTH, EXPERIMENT_NAMES
from rollout_contract.protocol import DEFAULT_QUALIFIER
from rollout_contract.resources import ExperimentResources
from tests.infra.conftest import ACCOUNT, EXPERIMENTS, MODES, REGION, SYNTH_TIMEOUT_S, Synthesized
from tests.infra.test_infra_cli import cdk

#: The first test also pays for the session's synth of two apps (minutes on a busy machine).
pytestmark = [pytest.mark.cdk, pytest.mark.timeout(SYNTH_TIMEOUT_S)]

PROJECT_ROOT = Path(__file__).resolve().parents[2]
#: AWS's advice for an SQS event source: visibility timeout at least six times the function's timeout.
VISIBILITY_PER_TIMEOUT = 6
#: Resources whose names are account-wide (not regional), with the property that names them.
ACCOUNT_WIDE_NAMES = {
    "AWS::IAM::Role": "RoleName",
    "AWS::IAM::ManagedPolicy": "ManagedPolicyName",
    "AWS::IAM::User": "UserName",
    "AWS::IAM::Group": "GroupName",
    "AWS::IAM::InstanceProfile": "InstanceProfileName",
    "AWS::CloudWatch::Dashboard": "DashboardName",
    "AWS::S3::Bucket": "BucketName",
}


def _resolve(node: Any, partition: str = "aws") -> Any:
    """Evaluate the intrinsics of an environment-bound template's names (only the partition stays a Ref)."""
    if isinstance(node, list):
        return [_resolve(item, partition) for item in node]
    if isinstance(node, dict):
        if node == {"Ref": "AWS::Partition"}:
            return partition
        if set(node) == {"Fn::Join"}:
            separator, parts = node["Fn::Join"]
            return separator.join(str(_resolve(part, partition)) for part in parts)
        return {key: _resolve(value, partition) for key, value in node.items()}
    return node


def _synth_experiment(tmp_path: Path, exp_id: str, *, region: str = REGION) -> Template:
    app = App(outdir=str(tmp_path))
    add_nag_checks(app)
    stack = build_experiment(
        app,
        experiment_settings({"experiment": exp_id, "image_tag": "v1"}),
        env=Environment(account=ACCOUNT, region=region),
    )
    return Template.from_json(app.synth().get_stack_by_name(stack.stack_name).template)


# --- 1. environment-bound synth ------------------------------------------------------------------------------


def test_cdk_cli_synth_with_credentials_environment_passes_cdk_nag(tmp_path: Path) -> None:
    # GIVEN the environment the CDK CLI sets when it has credentials (the stacks become environment-bound)
    # WHEN ops synthesize the demo experiment as the reproduction does
    result = cdk(
        "synth",
        "-c",
        "experiment=demo",
        "-c",
        "image_tag=v1",
        "--quiet",
        outdir=tmp_path,
        env={"CDK_DEFAULT_ACCOUNT": ACCOUNT, "CDK_DEFAULT_REGION": REGION},
    )
    # THEN synth succeeds: every cdk-nag acknowledgement matches the literal ARNs
    assert result.returncode == 0, result.stderr[-3000:]
    template = json.loads(
        (tmp_path / f"{ExperimentResources.for_experiment('demo').stack_name}.template.json").read_text()
    )
    assert ACCOUNT in json.dumps(template)


# --- 2. the longest experiment id ----------------------------------------------------------------------------


def test_the_longest_experiment_id_fits_every_name_and_one_more_character_does_not() -> None:
    # GIVEN the derived maximum
    longest = "a" * EXPERIMENT_MAX_LENGTH
    # WHEN every derived name is rendered for it (regions at their longest)
    fixed = {kind: rule.fixed_length for kind, rule in EXPERIMENT_NAMES.items()}
    # THEN each fits its service's limit, and one of them is exactly full (the maximum is tight)
    assert all(fixed[kind] + len(longest) <= rule.max_length for kind, rule in EXPERIMENT_NAMES.items())
    assert any(fixed[kind] + len(longest) == rule.max_length for kind, rule in EXPERIMENT_NAMES.items())
    # AND the flag parser refuses one more character, naming the flag and the limiting name
    with pytest.raises(ContextError, match=rf"-c experiment: .*1-{EXPERIMENT_MAX_LENGTH} lowercase.*EventBridge"):
        experiment_settings({"experiment": longest + "a", "image_tag": "v1"})


def test_an_experiment_id_of_the_maximum_length_synthesizes(tmp_path: Path) -> None:
    # GIVEN an experiment id of the maximum length, with hyphens (runtime names turn them into '_')
    exp_id = ("ab-" * EXPERIMENT_MAX_LENGTH)[: EXPERIMENT_MAX_LENGTH - 1] + "z"
    assert len(exp_id) == EXPERIMENT_MAX_LENGTH
    # WHEN its stack is synthesized with cdk-nag (CDK validates name lengths and patterns at synth)
    template = _synth_experiment(tmp_path, exp_id)
    # THEN every explicit name is within its service's rules
    names = ExperimentResources.for_experiment(exp_id)
    (rule,) = template.find_resources("AWS::Events::Rule", {"Properties": {"Name": names.result_rule_name}}).values()
    assert len(rule["Properties"]["Name"]) <= 64
    queues = [q["Properties"]["QueueName"] for q in template.find_resources("AWS::SQS::Queue").values()]
    assert len(queues) == 6 and all(len(name) <= 80 for name in queues)
    (runtime,) = template.find_resources("AWS::BedrockAgentCore::Runtime").values()
    assert re.fullmatch(r"[a-zA-Z][a-zA-Z0-9_]{0,47}", runtime["Properties"]["AgentRuntimeName"])


# --- 5. the runtime role trusts its own runtime only ---------------------------------------------------------


def test_runtime_roles_of_prefix_named_experiments_trust_only_their_own_runtime(
    synthesized: dict[str, Synthesized],
) -> None:
    # GIVEN two experiments whose names are prefixes of each other (alpha, alpha-2), environment-bound
    synth = synthesized["bound"]
    base = f"arn:aws:bedrock-agentcore:{REGION}:{ACCOUNT}:runtime/"
    runtime_arns = {
        exp_id: f"{base}{ExperimentResources.for_experiment(exp_id).runtime_name}-AbCdE12345" for exp_id in EXPERIMENTS
    }
    for exp_id in EXPERIMENTS:
        # WHEN the trust policy of the experiment's runtime role is read
        (role,) = [
            r
            for logical_id, r in synth.experiments[exp_id].find_resources("AWS::IAM::Role").items()
            if logical_id.startswith("AgentExecutionRole")
        ]
        (statement,) = _resolve(role["Properties"]["AssumeRolePolicyDocument"]["Statement"])
        patterns = statement["Condition"]["ArnLike"]["aws:SourceArn"]
        assert statement["Condition"]["StringEquals"] == {"aws:SourceAccount": ACCOUNT}

        # THEN its own runtime (and paths under it) match, the other experiment's runtime does not
        def matches(arn: str, patterns: list[str] = patterns) -> bool:
            return any(fnmatch.fnmatchcase(arn, pattern) for pattern in patterns)

        own = runtime_arns[exp_id]
        assert matches(own) and matches(f"{own}/runtime-endpoint/{DEFAULT_QUALIFIER}")
        for other, arn in runtime_arns.items():
            if other != exp_id:
                assert not matches(arn), f"{exp_id}'s runtime role trusts {other}'s runtime"


# --- 6. and 7. trainer access: destroy works, nothing collides across regions ---------------------------------


def test_nothing_outside_the_stack_can_hold_its_policies_so_destroy_works(synth: Synthesized) -> None:
    # GIVEN an experiment stack
    template = synth.experiments["alpha"]
    resources = template.to_json()["Resources"]
    # WHEN its IAM resources are listed
    # THEN it holds no managed policy, user or group that someone could attach outside the stack
    for kind in ("AWS::IAM::ManagedPolicy", "AWS::IAM::User", "AWS::IAM::Group"):
        assert template.find_resources(kind) == {}
    # AND every inline policy belongs to roles of the stack itself
    for policy in template.find_resources("AWS::IAM::Policy").values():
        for role in policy["Properties"]["Roles"]:
            assert role["Ref"] in resources
    # AND trainers get access by assuming the stack's trainer role (trusting this account), published as an output
    outputs = template.to_json()["Outputs"]
    role_id = outputs["TrainerRoleArn"]["Value"]["Fn::GetAtt"][0]
    trust = resources[role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert [s["Principal"] for s in trust] == [
        {"AWS": {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":iam::", {"Ref": "AWS::AccountId"}, ":root"]]}}
    ]
    # AND the README's deploy steps use that role and end with a destroy
    readme = (PROJECT_ROOT / "README.md").read_text()
    deploy = readme[readme.index("## Deploying to AWS") :]
    assert "TrainerRoleArn" in deploy and "role_arn" in deploy
    assert "npx cdk destroy -c experiment=" in deploy
    assert "attach-role-policy" not in deploy and "attach-user-policy" not in deploy


def test_one_experiment_in_two_regions_shares_no_account_wide_name(
    synthesized: dict[str, Synthesized], tmp_path: Path
) -> None:
    # GIVEN experiment alpha deployed in two regions of one account
    templates = {
        REGION: synthesized["bound"].experiments["alpha"],
        "eu-west-1": _synth_experiment(tmp_path, "alpha", region="eu-west-1"),
    }
    # WHEN the names of account-wide resources are collected per region
    names = {
        region: {
            json.dumps(_resolve(resource["Properties"][field]))
            for kind, field in ACCOUNT_WIDE_NAMES.items()
            for resource in template.find_resources(kind).values()
            if field in resource["Properties"]
        }
        for region, template in templates.items()
    }
    # THEN none is used in both regions (unnamed resources get unique generated names)
    assert names[REGION] and names[REGION].isdisjoint(names["eu-west-1"])


# --- 8. the image is always named ----------------------------------------------------------------------------


def test_an_experiment_without_an_image_fails_synth_naming_the_flag(tmp_path: Path) -> None:
    # GIVEN an experiment flag alone (the repository starts empty: a default tag would point at nothing)
    settings = experiment_settings({"experiment": "demo"})
    assert settings.image is None
    # WHEN its stack is built
    stack = build_experiment(App(outdir=str(tmp_path)), settings)
    # THEN it carries an error (which fails `cdk synth` and `cdk deploy`, not `cdk destroy`) naming the flag,
    # the repository and the alternative
    errors = Annotations.from_stack(stack).find_error("*", Match.string_like_regexp("missing -c image_tag=TAG"))
    assert len(errors) == 1
    assert "agentcore-rollouts-agents" in str(errors[0].entry.data) and "-c agent_dir" in str(errors[0].entry.data)


# --- 9. queues and logs --------------------------------------------------------------------------------------


@pytest.mark.parametrize("exp_id", EXPERIMENTS)
def test_queue_visibility_covers_six_function_timeouts(synth: Synthesized, exp_id: str) -> None:
    # GIVEN each SQS event source of an experiment
    resources = synth.experiments[exp_id].to_json()["Resources"]
    mappings = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::Lambda::EventSourceMapping"]
    assert len(mappings) == 2
    for mapping in mappings:
        # WHEN the consuming function's timeout and the queue's visibility timeout are read
        timeout = resources[mapping["FunctionName"]["Ref"]]["Properties"]["Timeout"]
        visibility = resources[mapping["EventSourceArn"]["Fn::GetAtt"][0]]["Properties"]["VisibilityTimeout"]
        # THEN a message stays hidden for at least six runs of the function (AWS's advice for retries)
        assert visibility >= VISIBILITY_PER_TIMEOUT * timeout


def test_every_dead_letter_queue_keeps_messages_longer_than_its_source(synth: Synthesized) -> None:
    # GIVEN every queue with a redrive policy (SQS counts a message's age from its first enqueue)
    resources = synth.experiments["alpha"].to_json()["Resources"]
    sources = [r["Properties"] for r in resources.values() if "RedrivePolicy" in r.get("Properties", {})]
    assert len(sources) == 3
    for source in sources:
        dlq = resources[source["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0]]["Properties"]
        # THEN its DLQ keeps messages at least twice as long, so a late dead letter still waits days
        assert dlq["MessageRetentionPeriod"] >= 2 * source["MessageRetentionPeriod"], source["QueueName"]


def test_the_runtime_log_group_gets_a_retention_from_the_stack(synth: Synthesized) -> None:
    # GIVEN the alpha stack's runtime
    template = synth.experiments["alpha"]
    (runtime_id,) = template.find_resources("AWS::BedrockAgentCore::Runtime")
    # WHEN its log-retention resources are read
    (retention,) = template.find_resources("Custom::LogRetention").values()
    # THEN the runtime's DEFAULT endpoint log group gets a retention (created if ACR has not yet)
    assert retention["Properties"]["LogGroupName"] == {
        "Fn::Join": [
            "",
            [RUNTIME_LOG_GROUP_PREFIX, {"Fn::GetAtt": [runtime_id, "AgentRuntimeId"]}, f"-{DEFAULT_QUALIFIER}"],
        ]
    }
    assert retention["Properties"]["RetentionInDays"] == 30
    # AND every log group the stack creates has one too
    groups = template.find_resources("AWS::Logs::LogGroup").values()
    assert groups and all("RetentionInDays" in group["Properties"] for group in groups)


# --- 10. cfn-lint --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_cfn_lint_passes_on_every_template(synthesized: dict[str, Synthesized], mode: str) -> None:
    # GIVEN every template of the app, in both synth modes
    templates = synthesized[mode].template_files()
    assert len(templates) == 1 + len(EXPERIMENTS)
    # WHEN cfn-lint checks them with the project's settings (.cfnlintrc.yaml names each ignored rule and why)
    cfn_lint = shutil.which("cfn-lint", path=str(Path(sys.executable).parent))
    assert cfn_lint, "cfn-lint is not installed: run `make install` (it is a dev extra)"
    result = subprocess.run(
        [cfn_lint, *map(str, templates)], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    # THEN it reports nothing
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-1000:]
