"""Template specs of the CDK app: the shared stack and two experiments, synthesized once with cdk-nag.

The app comes from ``conftest.py`` (``synth``: environment-agnostic; ``synthesized``: both synth modes).
"""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_sqs as sqs
from aws_cdk.assertions import Match, Template

from infra.functions import powertools_version
from infra.nag import add_nag_checks
from rollout_contract.budgets import SESSION_BUDGET_ID
from rollout_contract.credentials import ExperimentSecret
from rollout_contract.keys import experiment_prefix, payload_ref_prefix
from rollout_contract.metrics import (
    COMPLETED,
    DURATION,
    EXP_DIMENSION,
    NAMESPACE,
    OVERDUE,
    REWARD,
    RUN_DIMENSION,
    STATUS_DIMENSION,
    STOPS,
)
from rollout_contract.monitoring import SESSION_HOUR_USD, Monitored
from rollout_contract.monitoring import dashboard as dashboard_of
from rollout_contract.protocol import DEFAULT_INVOKE_TPS, SERVICE_QUOTA_EXCEEDED, THROTTLING
from rollout_contract.resources import (
    AGENT_REPOSITORY_NAME,
    BUDGET_TABLE,
    DEFAULT_SESSION_BUDGET,
    ExperimentDescriptor,
    ExperimentKind,
    ExperimentResources,
    HandlerSettings,
    QueueSpec,
    result_event_pattern,
)
from rollout_contract.results import Status
from rollout_contract.sandbox import SANDBOX_SESSION_PREFIX
from tests.infra.conftest import (
    ALARM_TOPIC_ARN,
    ENDPOINTS,
    MODES,
    MULTI_ENDPOINT_EXPERIMENT,
    SANDBOX_EXPERIMENT,
    SYNTH_TIMEOUT_S,
    Synthesized,
)
from trainer_client.doctor import policy_lets_rule_send

#: The first test also pays for the session's synth of two apps (minutes on a busy machine).
pytestmark = [pytest.mark.cdk, pytest.mark.timeout(SYNTH_TIMEOUT_S)]


def _resources(template: Template, kind: str) -> dict[str, dict[str, Any]]:
    return template.find_resources(kind)


def _one(template: Template, kind: str, **properties: Any) -> dict[str, Any]:
    found = template.find_resources(kind, {"Properties": Match.object_like(properties)})
    assert len(found) == 1, f"expected one {kind} with {properties}, found {len(found)}"
    return next(iter(found.values()))


def _logical_id(template: Template, kind: str, **properties: Any) -> str:
    found = template.find_resources(kind, {"Properties": Match.object_like(properties)})
    assert len(found) == 1
    return next(iter(found))


def _render(node: Any) -> Any:
    """Evaluate the intrinsics a template uses for names and ARNs into readable placeholder strings."""
    if isinstance(node, list):
        return [_render(item) for item in node]
    if not isinstance(node, dict):
        return node
    if set(node) == {"Ref"}:
        return f"<{node['Ref']}>"
    if set(node) == {"Fn::GetAtt"}:
        return "<{}.{}>".format(*node["Fn::GetAtt"])
    if set(node) == {"Fn::Join"}:
        separator, parts = node["Fn::Join"]
        return separator.join(str(_render(part)) for part in parts)
    return {key: _render(value) for key, value in node.items()}


def _statements(template: Template, logical_prefix: str) -> list[dict[str, Any]]:
    policies = {
        logical_id: resource
        for logical_id, resource in {
            **_resources(template, "AWS::IAM::Policy"),
            **_resources(template, "AWS::IAM::ManagedPolicy"),
        }.items()
        if logical_id.startswith(logical_prefix)
    }
    assert policies, f"no policy whose logical id starts with {logical_prefix}"
    return [
        _render(statement)
        for policy in policies.values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def _grants(statements: list[dict[str, Any]]) -> set[tuple[str, str]]:
    pairs = set()
    for statement in statements:
        assert statement["Effect"] == "Allow"
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        pairs |= {(action, resource) for action in actions for resource in resources}
    return pairs


@pytest.mark.parametrize("mode", MODES)
def test_every_stack_passes_cdk_nag_aws_solutions(synthesized: dict[str, Synthesized], mode: str) -> None:
    # GIVEN the app synthesized with the AwsSolutions pack (synth raises on an unacknowledged finding),
    # environment-agnostic and environment-bound (what `cdk deploy` synthesizes with credentials)
    # WHEN the validation report is read
    reports = synthesized[mode].report["pluginReports"]
    # THEN no plugin reports a violation that was not acknowledged
    assert [r["pluginName"] for r in reports if r["conclusion"] != "success"] == []


def test_nag_checks_fail_synth_on_an_unacknowledged_finding(tmp_path: Path) -> None:
    # GIVEN an app with the checks and a queue that breaks AwsSolutions-SQS3/SQS4 (no DLQ, no TLS policy)
    app = App(outdir=str(tmp_path))
    add_nag_checks(app)
    sqs.Queue(Stack(app, "Bad"), "Queue")
    # WHEN it is synthesized THEN synth fails, naming the rule
    with pytest.raises(RuntimeError, match="AwsSolutions-SQS4"):
        app.synth()


def test_results_bucket_is_encrypted_private_tls_only_and_retained(synth: Synthesized) -> None:
    # GIVEN the shared stack WHEN its results bucket is read
    buckets = synth.shared.find_resources(
        "AWS::S3::Bucket",
        {"Properties": {"BucketName": Match.any_value(), "VersioningConfiguration": Match.any_value()}},
    )
    ((bucket_id, bucket),) = buckets.items()
    properties = bucket["Properties"]
    # THEN SSE, public access block, versioning, retention and the access-log target are set
    assert properties["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"] == {
        "SSEAlgorithm": "AES256"
    }
    assert properties["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    assert properties["VersioningConfiguration"] == {"Status": "Enabled"}
    logs_id = _logical_id(
        synth.shared, "AWS::S3::Bucket", LifecycleConfiguration=Match.any_value(), BucketName=Match.absent()
    )
    assert properties["LoggingConfiguration"]["DestinationBucketName"] == {"Ref": logs_id}
    assert bucket["DeletionPolicy"] == "Retain"
    # AND its bucket policy denies every request that is not TLS
    policy = _one(synth.shared, "AWS::S3::BucketPolicy", Bucket={"Ref": bucket_id})
    denials = [s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s["Effect"] == "Deny"]
    assert [(s["Action"], s["Principal"], s["Condition"]) for s in denials] == [
        ("s3:*", {"AWS": "*"}, {"Bool": {"aws:SecureTransport": "false"}})
    ]


def test_results_bucket_sends_events_to_eventbridge_natively(synth: Synthesized) -> None:
    # GIVEN the shared stack
    # WHEN its resources are listed
    # THEN the bucket has EventBridge notifications on and no custom-resource Lambda configures them
    synth.shared.has_resource_properties(
        "AWS::S3::Bucket", {"NotificationConfiguration": {"EventBridgeConfiguration": {"EventBridgeEnabled": True}}}
    )
    assert synth.shared.find_resources("Custom::S3BucketNotifications") == {}
    assert synth.shared.find_resources("AWS::Lambda::Function") == {}


def test_agent_repository_scans_on_push_and_keeps_tags_immutable(synth: Synthesized) -> None:
    # GIVEN the shared stack WHEN the ECR repository is read
    repository = _one(synth.shared, "AWS::ECR::Repository", RepositoryName=AGENT_REPOSITORY_NAME)
    # THEN it scans images, keeps tags immutable (but the demo default), has a lifecycle policy, is retained
    properties = repository["Properties"]
    assert properties["ImageScanningConfiguration"] == {"ScanOnPush": True}
    assert properties["ImageTagMutability"] == "IMMUTABLE_WITH_EXCLUSION"
    assert properties["ImageTagMutabilityExclusionFilters"] == [
        {"ImageTagMutabilityExclusionFilterType": "WILDCARD", "ImageTagMutabilityExclusionFilterValue": "latest"}
    ]
    assert "LifecyclePolicyText" in properties["LifecyclePolicy"]
    assert repository["DeletionPolicy"] == "Retain"


def test_budget_table_matches_the_contract_and_is_retained(synth: Synthesized) -> None:
    # GIVEN the shared stack WHEN the budget table is read
    table = _one(synth.shared, "AWS::DynamoDB::Table", TableName=BUDGET_TABLE.name)
    properties = table["Properties"]
    # THEN its key, billing, TTL and PITR follow BUDGET_TABLE and it survives stack deletion
    assert properties["KeySchema"] == [{"AttributeName": BUDGET_TABLE.partition_key, "KeyType": "HASH"}]
    assert properties["BillingMode"] == "PAY_PER_REQUEST"
    assert properties["TimeToLiveSpecification"] == {"AttributeName": BUDGET_TABLE.ttl_attribute, "Enabled": True}
    assert properties["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert table["DeletionPolicy"] == "Retain"


@pytest.mark.parametrize("queue_field", ["dispatch_queue", "completion_queue", "finisher_queue"])
def test_queues_match_their_contract_spec_with_encryption_and_dlq(synth: Synthesized, queue_field: str) -> None:
    # GIVEN an experiment's QueueSpec
    template = synth.experiments["alpha"]
    spec: QueueSpec = getattr(ExperimentResources.for_experiment("alpha"), queue_field)
    # WHEN the queue and its DLQ are read
    dlq_id = _logical_id(template, "AWS::SQS::Queue", QueueName=spec.dlq_name)
    queue = _one(template, "AWS::SQS::Queue", QueueName=spec.name)["Properties"]
    # THEN visibility, retention and redrive follow the spec, and both queues are encrypted
    assert queue["VisibilityTimeout"] == spec.visibility_timeout_s
    assert queue["MessageRetentionPeriod"] == spec.retention_s
    assert queue["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": [dlq_id, "Arn"]},
        "maxReceiveCount": spec.max_receive_count,
    }
    assert queue["SqsManagedSseEnabled"] is True
    assert _one(template, "AWS::SQS::Queue", QueueName=spec.dlq_name)["Properties"]["SqsManagedSseEnabled"] is True


def test_every_queue_denies_requests_without_tls(synth: Synthesized) -> None:
    # GIVEN an experiment's six queues (three queues, three DLQs)
    template = synth.experiments["alpha"]
    queue_ids = set(_resources(template, "AWS::SQS::Queue"))
    # WHEN the queue policies are read
    protected = set()
    for policy in _resources(template, "AWS::SQS::QueuePolicy").values():
        statements = policy["Properties"]["PolicyDocument"]["Statement"]
        if any(
            s["Effect"] == "Deny" and s.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}
            for s in statements
        ):
            protected |= {ref["Ref"] for ref in policy["Properties"]["Queues"]}
    # THEN every queue is covered by a TLS-only statement
    assert len(queue_ids) == 6
    assert protected == queue_ids


def test_sessions_table_matches_the_contract_spec(synth: Synthesized) -> None:
    # GIVEN the experiment's TableSpec
    spec = ExperimentResources.for_experiment("alpha").sessions_table
    # WHEN the table is read
    properties = _one(synth.experiments["alpha"], "AWS::DynamoDB::Table", TableName=spec.name)["Properties"]
    # THEN key, TTL, billing, PITR and the in-flight index follow the spec
    assert properties["KeySchema"] == [{"AttributeName": spec.partition_key, "KeyType": "HASH"}]
    assert properties["TimeToLiveSpecification"] == {"AttributeName": spec.ttl_attribute, "Enabled": True}
    assert properties["BillingMode"] == "PAY_PER_REQUEST"
    assert properties["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert properties["GlobalSecondaryIndexes"] == [
        {
            "IndexName": index.name,
            "KeySchema": [
                {"AttributeName": index.partition_key, "KeyType": "HASH"},
                {"AttributeName": index.sort_key, "KeyType": "RANGE"},
            ],
            "Projection": {"ProjectionType": "ALL"},
        }
        for index in spec.indexes
    ]
    types = {a["AttributeName"]: a["AttributeType"] for a in properties["AttributeDefinitions"]}
    assert types == {
        spec.partition_key: "S",
        **{i.partition_key: "S" for i in spec.indexes},
        **{i.sort_key: "N" for i in spec.indexes},
    }


def test_result_rule_pattern_is_the_contracts_and_targets_both_queues(synth: Synthesized) -> None:
    # GIVEN the alpha stack and the contract's pattern for its bucket
    stack = synth.stacks["alpha"]
    template = synth.experiments["alpha"]
    names = stack.names
    expected = stack.resolve(result_event_pattern(stack.results_bucket.bucket_name, "alpha"))
    # WHEN the rule is read
    rule = _one(template, "AWS::Events::Rule", Name=names.result_rule_name)["Properties"]
    # THEN its pattern is exactly the contract's, and it feeds the completion and finisher queues
    assert rule["EventPattern"] == expected
    targets = {target["Arn"]["Fn::GetAtt"][0]: target for target in rule["Targets"]}
    completion_id = _logical_id(template, "AWS::SQS::Queue", QueueName=names.completion_queue.name)
    finisher_id = _logical_id(template, "AWS::SQS::Queue", QueueName=names.finisher_queue.name)
    assert set(targets) == {completion_id, finisher_id}
    for queue_id, spec in ((completion_id, names.completion_queue), (finisher_id, names.finisher_queue)):
        dlq_id = _logical_id(template, "AWS::SQS::Queue", QueueName=spec.dlq_name)
        assert targets[queue_id]["DeadLetterConfig"] == {"Arn": {"Fn::GetAtt": [dlq_id, "Arn"]}}
        assert targets[queue_id]["RetryPolicy"] == {"MaximumEventAgeInSeconds": 86400, "MaximumRetryAttempts": 185}


def test_eventbridge_may_send_only_for_the_result_rule(synth: Synthesized) -> None:
    # GIVEN the alpha stack's rule and completion queue
    template = synth.experiments["alpha"]
    names = ExperimentResources.for_experiment("alpha")
    rule_id = _logical_id(template, "AWS::Events::Rule", Name=names.result_rule_name)
    queue_id = _logical_id(template, "AWS::SQS::Queue", QueueName=names.completion_queue.name)
    # WHEN the queue's policy is read
    policy = _one(template, "AWS::SQS::QueuePolicy", Queues=[{"Ref": queue_id}])
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    # THEN events.amazonaws.com may send, conditioned on the rule's ARN
    allow = [s for s in statements if s["Effect"] == "Allow"]
    assert allow == [
        {
            "Action": ["sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"],
            "Condition": {"ArnEquals": {"aws:SourceArn": {"Fn::GetAtt": [rule_id, "Arn"]}}},
            "Effect": "Allow",
            "Principal": {"Service": "events.amazonaws.com"},
            "Resource": {"Fn::GetAtt": [queue_id, "Arn"]},
        }
    ]


def test_dispatcher_and_finisher_consume_their_queues_with_partial_batch_failures(synth: Synthesized) -> None:
    # GIVEN the alpha stack
    template = synth.experiments["alpha"]
    names = ExperimentResources.for_experiment("alpha")
    mappings = {
        m["Properties"]["EventSourceArn"]["Fn::GetAtt"][0]: m["Properties"]
        for m in _resources(template, "AWS::Lambda::EventSourceMapping").values()
    }
    dispatch = mappings[_logical_id(template, "AWS::SQS::Queue", QueueName=names.dispatch_queue.name)]
    finisher = mappings[_logical_id(template, "AWS::SQS::Queue", QueueName=names.finisher_queue.name)]
    # THEN both take batches of 10 at once (no batching window) with partial batch responses, and the
    # dispatcher's concurrency is capped
    for mapping in (dispatch, finisher):
        assert mapping["BatchSize"] == 10
        assert mapping["MaximumBatchingWindowInSeconds"] == 0
        assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert dispatch["ScalingConfig"] == {"MaximumConcurrency": 5}
    assert len(mappings) == 2


def test_functions_run_the_contract_handlers_on_arm64_with_the_powertools_layer(synth: Synthesized) -> None:
    # GIVEN the alpha stack's functions
    functions = _rollout_functions(synth.experiments["alpha"])
    # THEN the three handlers run on Python 3.14 ARM64, with HandlerSettings' variables and the pinned layer
    assert sorted(f["Handler"] for f in functions) == [
        "lambdas.dispatcher.handler",
        "lambdas.finisher.handler",
        "lambdas.sweeper.handler",
    ]
    variables = set(HandlerSettings.model_fields)
    for function in functions:
        assert function["Runtime"] == "python3.14"
        assert function["Architectures"] == ["arm64"]
        assert {name.removeprefix("ROLLOUTS_").lower() for name in function["Environment"]["Variables"]} == variables
        assert len(function["Layers"]) == 1
        assert function["Layers"][0]["Ref"].startswith("SsmParameterValueawsservicepowertoolspythonarm64python314")
    # AND the layer is the pinned release (the one the suite runs), never `latest`
    parameters = synth.experiments["alpha"].to_json()["Parameters"]
    layer_parameter = parameters[functions[0]["Layers"][0]["Ref"]]["Default"]
    assert layer_parameter == f"/aws/service/powertools/python/arm64/python3.14/{powertools_version()}"
    assert powertools_version() == importlib.metadata.version("aws-lambda-powertools")


def _rollout_functions(template: Template) -> list[dict[str, Any]]:
    """The experiment's own functions (not CDK's log-retention helper)."""
    functions = [f["Properties"] for f in _resources(template, "AWS::Lambda::Function").values()]
    return [f for f in functions if f["Handler"].startswith("lambdas.")]


def test_log_groups_have_a_retention(synth: Synthesized) -> None:
    # GIVEN every log group of an experiment WHEN read THEN each has a retention period
    groups = _resources(synth.experiments["alpha"], "AWS::Logs::LogGroup").values()
    assert len(groups) == 3
    assert all(group["Properties"]["RetentionInDays"] == 30 for group in groups)


def test_sweeper_runs_every_minute(synth: Synthesized) -> None:
    # GIVEN the alpha stack WHEN its scheduled rule is read THEN it fires every minute
    rule = _one(synth.experiments["alpha"], "AWS::Events::Rule", ScheduleExpression="rate(1 minute)")
    assert len(rule["Properties"]["Targets"]) == 1


def test_runtime_role_may_write_results_only_under_the_experiment_prefix(synth: Synthesized) -> None:
    # GIVEN the runtime's execution role
    statements = _statements(synth.experiments["alpha"], "AgentExecutionRoleDefaultPolicy")
    # WHEN its S3 grants are collected
    s3_grants = {pair for pair in _grants(statements) if pair[0].startswith("s3:")}
    # THEN it is exactly PutObject on <bucket>/alpha/*, first writer wins (a put without If-None-Match is refused)
    assert s3_grants == {("s3:PutObject", f"arn:<AWS::Partition>:s3:::{_bucket()}/{experiment_prefix('alpha')}*")}
    (put,) = [s for s in statements if s["Action"] == "s3:PutObject"]
    assert put["Condition"] == {"StringEquals": {"s3:if-none-match": "*"}}


def names_secret(experiment: str) -> str:
    return ExperimentSecret.RESULT_KEY.secret_name(experiment)


def test_runtime_role_reads_only_its_own_experiments_model_key(synth: Synthesized) -> None:
    # GIVEN the runtime's execution role and the stack's secrets
    template = synth.experiments["alpha"]
    statements = _statements(template, "AgentExecutionRoleDefaultPolicy")
    model_key = _logical_id(
        template, "AWS::SecretsManager::Secret", Name=ExperimentSecret.MODEL_KEY.secret_name("alpha")
    )
    # WHEN its Secrets Manager grants are collected
    secret_grants = {pair for pair in _grants(statements) if pair[0].startswith("secretsmanager:")}
    # THEN it may read the model-call credential of its experiment and nothing else: not the experiment key results
    # are proven with (model-written code holding these credentials could sign a forged result), nor the gateway's
    # admin credential (D100)
    assert secret_grants == {("secretsmanager:GetSecretValue", f"<{model_key}>")}
    # AND every secret is created by the stack with a generated value, named by the contract
    secrets = {
        resource["Properties"]["Name"]: resource["Properties"]
        for resource in _resources(template, "AWS::SecretsManager::Secret").values()
    }
    assert set(secrets) == {secret.secret_name("alpha") for secret in ExperimentSecret}
    assert all(properties["GenerateSecretString"]["PasswordLength"] >= 32 for properties in secrets.values())


def _bucket() -> str:
    return "agentcore-rollouts-results-<AWS::AccountId>-<AWS::Region>"


def test_lambda_roles_hold_exactly_their_grants(synth: Synthesized) -> None:
    # GIVEN the alpha stack's resource ids
    template = synth.experiments["alpha"]
    names = ExperimentResources.for_experiment("alpha")
    runtime = "<AgentRuntime23CE8C05.AgentRuntimeArn>"
    table = f"<{_logical_id(template, 'AWS::DynamoDB::Table', TableName=names.sessions_table.name)}.Arn>"
    budget = f"arn:<AWS::Partition>:dynamodb:<AWS::Region>:<AWS::AccountId>:table/{BUDGET_TABLE.name}"
    results = f"arn:<AWS::Partition>:s3:::{_bucket()}/{experiment_prefix('alpha')}*"
    payloads = f"arn:<AWS::Partition>:s3:::{_bucket()}/{payload_ref_prefix('alpha')}*"
    dispatch_queue = f"<{_logical_id(template, 'AWS::SQS::Queue', QueueName=names.dispatch_queue.name)}.Arn>"
    dispatch_dlq = f"<{_logical_id(template, 'AWS::SQS::Queue', QueueName=names.dispatch_queue.dlq_name)}.Arn>"
    finisher_queue = f"<{_logical_id(template, 'AWS::SQS::Queue', QueueName=names.finisher_queue.name)}.Arn>"
    stop = {("bedrock-agentcore:StopRuntimeSession", r) for r in (runtime, f"{runtime}/*")}
    # WHEN each role's grants are collected (logs, tables and queue consumption aside, checked by resource)
    grants = {
        name: _grants(_statements(template, f"Workers{name}Role")) for name in ("Dispatcher", "Finisher", "Sweeper")
    }

    # THEN the runtime, S3 and queue grants are exactly what each function needs
    def scoped(pairs: set[tuple[str, str]]) -> set[tuple[str, str]]:
        return {(a, r) for a, r in pairs if a.startswith(("bedrock-agentcore:", "s3:", "sqs:"))}

    assert scoped(grants["Dispatcher"]) == stop | {
        ("bedrock-agentcore:InvokeAgentRuntime", runtime),
        ("bedrock-agentcore:InvokeAgentRuntime", f"{runtime}/*"),
        ("s3:PutObject", results),
        ("s3:GetObject", results),
        ("s3:GetObject", payloads),
        ("s3:ListBucket", f"arn:<AWS::Partition>:s3:::{_bucket()}"),
        ("sqs:SendMessage", dispatch_dlq),
        *{(a, dispatch_queue) for a in _CONSUME},
    }
    assert scoped(grants["Finisher"]) == stop | {("s3:GetObject", results), *{(a, finisher_queue) for a in _CONSUME}}
    assert scoped(grants["Sweeper"]) == stop | {("s3:PutObject", results), ("s3:GetObject", results)}
    # AND each function reads and updates only the table items it uses (as recorded by tests/e2e/test_e2e_iam.py),
    # and only the sweeper queries the sessions index
    get, update = "dynamodb:GetItem", "dynamodb:UpdateItem"
    assert {p for p in grants["Dispatcher"] if p[0].startswith("dynamodb:")} == {
        (a, t) for a in (get, update) for t in (table, budget)
    }
    assert {p for p in grants["Finisher"] if p[0].startswith("dynamodb:")} == {(update, table), (update, budget)}
    assert {p for p in grants["Sweeper"] if p[0].startswith("dynamodb:")} == {
        (update, table),
        (get, budget),
        (update, budget),
        ("dynamodb:Query", f"{table}/index/*"),
    }
    # AND of the shared budget table, only the session count and this runtime's endpoints' invoke budgets
    budget_grant = next(s for s in _statements(template, "WorkersSweeperRole") if s["Resource"] == budget)
    leading_keys = budget_grant["Condition"]["ForAllValues:StringEquals"]["dynamodb:LeadingKeys"]
    assert leading_keys == [SESSION_BUDGET_ID, *(f"tps#{runtime}#{q}" for q in ("DEFAULT", "endpoint_1", "endpoint_2"))]
    # AND the functions' result writes must be first-writer-wins
    for role in ("WorkersDispatcherRole", "WorkersSweeperRole"):
        (put,) = [s for s in _statements(template, role) if s["Action"] == "s3:PutObject"]
        assert put["Condition"] == {"StringEquals": {"s3:if-none-match": "*"}}
    # AND the result writers read the experiment key that signs their results, the finisher no secret (D100)
    result_key = f"<{_logical_id(template, 'AWS::SecretsManager::Secret', Name=names_secret('alpha'))}>"
    for name, wanted in (("Dispatcher", {result_key}), ("Sweeper", {result_key}), ("Finisher", set())):
        assert {r for a, r in grants[name] if a.startswith("secretsmanager:")} == wanted
        assert {a for a, _ in grants[name] if a.startswith("secretsmanager:")} <= {"secretsmanager:GetSecretValue"}
    # AND the dispatcher lists only its experiment's result and payload keys (its check for a stored result)
    listing = next(s for s in _statements(template, "WorkersDispatcherRole") if s["Action"] == "s3:ListBucket")
    assert listing["Condition"] == {
        "StringLike": {"s3:prefix": [f"{experiment_prefix('alpha')}*", f"{payload_ref_prefix('alpha')}*"]}
    }


_CONSUME = (
    "sqs:ReceiveMessage",
    "sqs:ChangeMessageVisibility",
    "sqs:GetQueueUrl",
    "sqs:DeleteMessage",
    "sqs:GetQueueAttributes",
)


def test_trainer_role_grants_exactly_what_a_trainer_needs(synth: Synthesized) -> None:
    # GIVEN the alpha stack's trainer role and its policy
    template = synth.experiments["alpha"]
    names = ExperimentResources.for_experiment("alpha")
    statements = _statements(template, "TrainerPolicy")
    dispatch_queue = f"<{_logical_id(template, 'AWS::SQS::Queue', QueueName=names.dispatch_queue.name)}.Arn>"
    completion_queue = f"<{_logical_id(template, 'AWS::SQS::Queue', QueueName=names.completion_queue.name)}.Arn>"
    table = f"<{_logical_id(template, 'AWS::DynamoDB::Table', TableName=names.sessions_table.name)}.Arn>"
    descriptor = _logical_id(template, "AWS::SSM::Parameter", Name=names.descriptor_parameter)
    index = f"{table}/index/{names.sessions_table.indexes[0].name}"
    dlqs = [
        f"<{_logical_id(template, 'AWS::SQS::Queue', QueueName=spec.dlq_name)}.Arn>"
        for spec in (names.dispatch_queue, names.completion_queue)
    ]
    finisher_queues = [
        f"<{_logical_id(template, 'AWS::SQS::Queue', QueueName=name)}.Arn>"
        for name in (names.finisher_queue.name, names.finisher_queue.dlq_name)
    ]
    rule = f"<{_logical_id(template, 'AWS::Events::Rule', Name=names.result_rule_name)}.Arn>"
    secrets = [
        f"<{_logical_id(template, 'AWS::SecretsManager::Secret', Name=secret.secret_name('alpha'))}>"
        for secret in ExperimentSecret
    ]
    # WHEN its grants are collected THEN they are exactly the trainer's needs, and rollouts doctor's reads
    assert _grants(statements) == {
        # the experiment's secrets: results' proofs, the gateway's model-call and admin credentials (D100)
        *{("secretsmanager:GetSecretValue", secret) for secret in secrets},
        ("sqs:SendMessage", dispatch_queue),
        ("sqs:GetQueueAttributes", dispatch_queue),
        ("sqs:GetQueueUrl", dispatch_queue),
        *{(a, completion_queue) for a in _CONSUME},
        ("s3:GetObject", f"arn:<AWS::Partition>:s3:::{_bucket()}/{experiment_prefix('alpha')}*"),
        ("s3:PutObject", f"arn:<AWS::Partition>:s3:::{_bucket()}/{payload_ref_prefix('alpha')}*"),
        (
            "ssm:GetParameter",
            f"arn:<AWS::Partition>:ssm:<AWS::Region>:<AWS::AccountId>:parameter<{descriptor}>",
        ),
        *{(a, dlq) for a in ("sqs:GetQueueAttributes", "sqs:GetQueueUrl") for dlq in dlqs},
        ("s3:ListBucket", f"arn:<AWS::Partition>:s3:::{_bucket()}"),
        ("dynamodb:GetItem", table),
        ("dynamodb:BatchGetItem", table),
        ("dynamodb:Query", index),
        ("dynamodb:Scan", table),
        ("dynamodb:UpdateItem", table),
        *{(a, q) for a in ("sqs:GetQueueAttributes", "sqs:GetQueueUrl") for q in finisher_queues},
        ("s3:GetBucketNotification", f"arn:<AWS::Partition>:s3:::{_bucket()}"),
        ("events:DescribeRule", rule),
        ("events:ListTargetsByRule", rule),
        ("bedrock-agentcore:GetAgentRuntime", "<AgentRuntime23CE8C05.AgentRuntimeArn>"),
        ("cloudwatch:GetMetricData", "*"),
        ("servicequotas:ListAWSDefaultServiceQuotas", "*"),  # the doctor's quotas line (trainer_client.quotas)
        ("servicequotas:ListServiceQuotas", "*"),
        ("dynamodb:GetItem", f"arn:<AWS::Partition>:dynamodb:<AWS::Region>:<AWS::AccountId>:table/{BUDGET_TABLE.name}"),
        (
            "cloudwatch:DescribeAlarms",
            "arn:<AWS::Partition>:cloudwatch:<AWS::Region>:<AWS::AccountId>:alarm:agentcore-rollouts-alpha-*",
        ),
    }
    # AND listing is limited to the experiment's prefix
    listing = next(s for s in statements if s["Action"] == "s3:ListBucket")
    assert listing["Condition"] == {"StringLike": {"s3:prefix": [f"{experiment_prefix('alpha')}*"]}}
    # AND its one write to the sessions table touches only its lease and the trainer of its rollouts
    owning = next(s for s in statements if s["Action"] == "dynamodb:UpdateItem")
    assert owning["Condition"]["ForAllValues:StringEquals"]["dynamodb:Attributes"] == [
        "session_id",
        "trainer",
        "alive_until",
        "expires_at",
    ]


def test_a_sandbox_experiments_trainer_may_run_sandboxes_in_the_shared_budgets_and_no_more(synth: Synthesized) -> None:
    # GIVEN alpha-2, deployed with -c sandbox=true, and alpha (an agent experiment)
    template = synth.experiments[SANDBOX_EXPERIMENT]
    names = ExperimentResources.for_experiment(SANDBOX_EXPERIMENT)
    table = f"<{_logical_id(template, 'AWS::DynamoDB::Table', TableName=names.sessions_table.name)}.Arn>"
    runtime = next(iter(_resources(template, "AWS::BedrockAgentCore::Runtime")))
    runtime_arn = f"<{runtime}.AgentRuntimeArn>"
    budget_table = f"arn:<AWS::Partition>:dynamodb:<AWS::Region>:<AWS::AccountId>:table/{BUDGET_TABLE.name}"
    statements = {s.get("Sid"): s for s in _statements(template, "TrainerPolicy")}
    # THEN its trainer may invoke and stop its runtime's sessions
    assert _grants([statements["RunSandboxes"]]) == {
        (action, resource)
        for action in ("bedrock-agentcore:InvokeAgentRuntime", "bedrock-agentcore:StopRuntimeSession")
        for resource in (runtime_arn, f"{runtime_arn}/*")
    }
    # AND read and update sandbox sessions' items only, and the two budget items its functions use
    assert _grants([statements["RecordSandboxes"]]) == {("dynamodb:UpdateItem", table)}
    assert statements["RecordSandboxes"]["Condition"] == {
        "ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{SANDBOX_SESSION_PREFIX}*"]}
    }
    assert _grants([statements["SpendBudgets"]]) == {
        ("dynamodb:GetItem", budget_table),
        ("dynamodb:UpdateItem", budget_table),
    }
    functions_budget = next(s for s in _statements(template, "WorkersSweeperRole") if s["Resource"] == budget_table)
    assert statements["SpendBudgets"]["Condition"] == functions_budget["Condition"]
    assert functions_budget["Condition"]["ForAllValues:StringEquals"]["dynamodb:LeadingKeys"] == [
        SESSION_BUDGET_ID,
        f"tps#{runtime_arn}#DEFAULT",
    ]
    # AND its descriptor says it hosts sandboxes, with the budgets its functions keep
    parameter = _one(template, "AWS::SSM::Parameter", Name=names.descriptor_parameter)
    descriptor = ExperimentDescriptor.model_validate_json(_render(parameter["Properties"]["Value"]))
    assert (descriptor.kind, descriptor.tps_limit, descriptor.session_budget) == (
        ExperimentKind.SANDBOX,
        DEFAULT_INVOKE_TPS,
        DEFAULT_SESSION_BUDGET,
    )
    # AND an agent experiment's trainer gets none of it
    agent_statements = _statements(synth.experiments["alpha"], "TrainerPolicy")
    assert not {"RunSandboxes", "RecordSandboxes", "SpendBudgets"} & {s.get("Sid") for s in agent_statements}


def test_endpoints_flag_adds_endpoints_that_follow_the_runtime_each_with_its_budget(synth: Synthesized) -> None:
    # GIVEN alpha, deployed with -c endpoints=3
    template = synth.experiments[MULTI_ENDPOINT_EXPERIMENT]
    runtime = next(iter(_resources(template, "AWS::BedrockAgentCore::Runtime")))
    runtime_arn = f"<{runtime}.AgentRuntimeArn>"
    # THEN its runtime gets two more endpoints, each serving the runtime's current version (not version 1)
    endpoints = _resources(template, "AWS::BedrockAgentCore::RuntimeEndpoint")
    assert sorted(_render(e["Properties"]["Name"]) for e in endpoints.values()) == ["endpoint_1", "endpoint_2"]
    for endpoint in endpoints.values():
        assert _render(endpoint["Properties"]["AgentRuntimeId"]) == f"<{runtime}.AgentRuntimeId>"
        assert _render(endpoint["Properties"]["AgentRuntimeVersion"]) == f"<{runtime}.AgentRuntimeVersion>"
    # AND the functions may spend each endpoint's invoke budget, and know of the three endpoints
    budget_table = f"arn:<AWS::Partition>:dynamodb:<AWS::Region>:<AWS::AccountId>:table/{BUDGET_TABLE.name}"
    budget = next(s for s in _statements(template, "WorkersDispatcherRole") if s["Resource"] == budget_table)
    assert budget["Condition"]["ForAllValues:StringEquals"]["dynamodb:LeadingKeys"] == [
        SESSION_BUDGET_ID,
        *(f"tps#{runtime_arn}#{q}" for q in ("DEFAULT", "endpoint_1", "endpoint_2")),
    ]
    for function in _rollout_functions(template):
        assert function["Environment"]["Variables"]["ROLLOUTS_RUNTIME_ENDPOINTS"] == str(ENDPOINTS)
    names = ExperimentResources.for_experiment(MULTI_ENDPOINT_EXPERIMENT)
    parameter = _one(template, "AWS::SSM::Parameter", Name=names.descriptor_parameter)
    assert (
        ExperimentDescriptor.model_validate_json(_render(parameter["Properties"]["Value"])).runtime_endpoints
        == ENDPOINTS
    )
    # AND an experiment without the flag has its runtime's own endpoint only
    assert _resources(synth.experiments[SANDBOX_EXPERIMENT], "AWS::BedrockAgentCore::RuntimeEndpoint") == {}


def test_descriptor_parameter_holds_a_valid_experiment_descriptor(synth: Synthesized) -> None:
    # GIVEN the alpha stack's descriptor parameter
    names = ExperimentResources.for_experiment("alpha")
    parameter = _one(synth.experiments["alpha"], "AWS::SSM::Parameter", Name=names.descriptor_parameter)
    # WHEN its value is rendered (intrinsics as placeholders) and parsed
    descriptor = ExperimentDescriptor.model_validate_json(_render(parameter["Properties"]["Value"]))
    # THEN it describes alpha's own resources and the shared ones
    assert descriptor.exp_id == "alpha"
    assert descriptor.region == "<AWS::Region>"
    assert descriptor.results_bucket == _bucket()
    assert descriptor.budget_table == BUDGET_TABLE.name
    assert descriptor.runtime_arn == "<AgentRuntime23CE8C05.AgentRuntimeArn>"
    queue_id = _logical_id(synth.experiments["alpha"], "AWS::SQS::Queue", QueueName=names.dispatch_queue.name)
    assert descriptor.dispatch_queue_url == f"<{queue_id}>"
    assert descriptor.endpoints == {}
    functions = _resources(synth.experiments["alpha"], "AWS::Lambda::Function")
    assert {role: name.strip("<>") for role, name in descriptor.function_names.items()} == {
        role: next(i for i, f in functions.items() if f["Properties"]["Handler"] == f"lambdas.{role}.handler")
        for role in ("dispatcher", "finisher", "sweeper")
    }


def test_alarms_cover_dead_letters_errors_throttling_and_stuck_rollouts(synth: Synthesized) -> None:
    # GIVEN the alpha stack WHEN its alarms are listed
    alarms = [a["Properties"] for a in _resources(synth.experiments["alpha"], "AWS::CloudWatch::Alarm").values()]
    watched = sorted(",".join(sorted(_metric_names(alarm))) for alarm in alarms)
    # THEN there is one per DLQ, one per function, one for throttling and one for stuck rollouts
    assert watched == sorted(
        ["ApproximateNumberOfMessagesVisible"] * 3 + ["Errors"] * 3 + ["DispatchErrors", "RolloutsOverdue"]
    )
    throttling = next(a for a in alarms if _metric_names(a) == {"DispatchErrors"})
    codes = {
        dimension["Value"]
        for query in throttling["Metrics"]
        if "MetricStat" in query
        for dimension in query["MetricStat"]["Metric"]["Dimensions"]
        if dimension["Name"] == "error_code"
    }
    # AND "throttled or out of sessions" counts both refusals
    assert codes == {THROTTLING.code, SERVICE_QUOTA_EXCEEDED.code}
    assert throttling["EvaluationPeriods"] == 10
    # AND the dashboard draws the invoke budget per minute on "dispatched" and the session budget on "in flight"
    (dashboard,) = synth.experiments["alpha"].find_resources("AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    assert "invoke budget (25/s = 1500/min, stops included)" in body and '"value\\":1500' in body
    assert "session budget (" in body


def test_stuck_rollouts_alarm_pages_on_3_minutes_of_overdue_rollouts_or_a_silent_sweeper(
    synth: Synthesized,
) -> None:
    # GIVEN the alpha stack WHEN the alarm on the sweeper's overdue gauge is read
    alarms = _resources(synth.experiments["alpha"], "AWS::CloudWatch::Alarm").values()
    (stuck,) = [a["Properties"] for a in alarms if _metric_names(a["Properties"]) == {OVERDUE}]
    # THEN it watches alpha's gauge, per minute, at its maximum
    (metric,) = stuck["Metrics"]
    assert metric["MetricStat"]["Metric"] == {
        "Namespace": NAMESPACE,
        "MetricName": OVERDUE,
        "Dimensions": [{"Name": "exp_id", "Value": "alpha"}],
    }
    assert (metric["MetricStat"]["Stat"], metric["MetricStat"]["Period"]) == ("Maximum", 60)
    # AND fires when any rollout is stuck in 3 back-to-back minutes, or when the gauge stops arriving
    assert (stuck["ComparisonOperator"], stuck["Threshold"]) == ("GreaterThanThreshold", 0)
    assert (stuck["EvaluationPeriods"], stuck["DatapointsToAlarm"]) == (3, 3)
    assert stuck["TreatMissingData"] == "breaching"
    # AND the dashboard draws the gauge in the in-flight graph
    (dashboard,) = _resources(synth.experiments["alpha"], "AWS::CloudWatch::Dashboard").values()
    widgets = json.loads(_render(dashboard["Properties"]["DashboardBody"]))["widgets"]
    in_flight = next(w for w in widgets if w["properties"].get("title") == "In flight")
    assert any(OVERDUE in metric for metric in in_flight["properties"]["metrics"])


def _widgets(template: Template) -> dict[str, dict[str, Any]]:
    """The dashboard's graph widgets' properties, by title."""
    (dashboard,) = _resources(template, "AWS::CloudWatch::Dashboard").values()
    widgets = json.loads(_render(dashboard["Properties"]["DashboardBody"]))["widgets"]
    return {w["properties"]["title"]: w["properties"] for w in widgets if w["type"] == "metric"}


def _drawn(widget: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(metric name, label, statistic) of each visible metric a widget draws; ("", label, expression) of each math."""
    drawn = []
    for *metric, options in widget["metrics"]:
        if "expression" in options:
            drawn.append(("", options["label"], options["expression"]))
        elif options.get("visible", True):
            drawn.append((metric[1], options["label"], options.get("stat", "Average")))
    return drawn


def test_dashboard_graphs_stops_failures_by_status_cost_and_durations_on_a_minute_scale(synth: Synthesized) -> None:
    # GIVEN the alpha stack WHEN its dashboard's widgets are read
    widgets = _widgets(synth.experiments["alpha"])
    # THEN stops are drawn with dispatches, under the invoke budget they share
    throughput = widgets["Submitted, dispatched, stopped, succeeded"]
    assert (STOPS, "session stops", "Sum") in _drawn(throughput)
    assert [a["value"] for a in throughput["annotations"]["horizontal"]] == [DEFAULT_INVOKE_TPS * 60]
    # AND failures have a widget of their own, one series per failed status, none of them in throughput
    failures = widgets["Failed rollouts by status"]
    assert [label for _, label, _ in _drawn(failures)] == [s.value for s in Status if s is not Status.SUCCEEDED]
    assert [label for name, label, _ in _drawn(throughput) if name == COMPLETED] == [Status.SUCCEEDED.value]
    # AND the duration graph has no 8-hour lifetime line; the lifetime is drawn against the longest rollout
    assert "annotations" not in widgets["Rollout duration (s)"]
    lifetime = widgets["Longest rollout vs session lifetime (s)"]
    assert [a["value"] for a in lifetime["annotations"]["horizontal"]] == [28_800]
    assert _drawn(lifetime) == [(DURATION, "longest rollout", "Maximum")]
    # AND session-hours and the cost per 1,000 rollouts are computed from the durations' sum and count
    expressions = {
        label: expression for name, label, expression in _drawn(widgets["Session-hours and cost"]) if not name
    }
    assert expressions["session-hours"] == "seconds / 3600"
    (cost,) = [e for label, e in expressions.items() if label.startswith("est. USD per 1,000 rollouts")]
    assert cost == f"1000 * seconds / 3600 * {SESSION_HOUR_USD:.4f} / rollouts"
    assert SESSION_HOUR_USD == pytest.approx(0.2546)
    # AND result written -> trainer is the age of the oldest completion event the trainer has not read
    (trainer_lag,) = widgets["Result written -> trainer (s)"]["metrics"]
    assert trainer_lag[:2] == ["AWS/SQS", "ApproximateAgeOfOldestMessage"] and "CompletionQueue" in trainer_lag[3]


def test_every_dashboard_axis_names_its_unit_as_the_local_page_does(synth: Synthesized) -> None:
    # GIVEN the alpha stack WHEN its dashboard's widgets are read
    widgets = _widgets(synth.experiments["alpha"])
    # THEN each left axis is labelled with its graph's unit (CloudWatch's own unit label off), and each right
    # axis that draws a series with its own
    watched = Monitored("alpha", "q", "c", {}, {}, {}, 28_800, DEFAULT_INVOKE_TPS, 90)  # titles and units only
    for graph in dashboard_of(watched).graphs():
        axes = widgets[graph.title]["yAxis"]
        assert axes["left"] == {"label": graph.left_unit, "showUnits": False}, graph.title
        if graph.right:
            assert axes["right"] == {"label": graph.right_unit, "showUnits": False}, graph.title
        else:
            assert "right" not in axes, graph.title
    # AND the units are the ones a reader expects: per minute, sessions, seconds
    assert widgets["Submitted, dispatched, stopped, succeeded"]["yAxis"]["left"]["label"] == "per minute"
    assert widgets["In flight"]["yAxis"]["left"]["label"] == "sessions"
    assert widgets["Dispatch lag (s)"]["yAxis"]["left"]["label"] == "seconds"


def test_dashboard_draws_every_run_of_the_experiment_found_by_search(synth: Synthesized) -> None:
    # GIVEN the alpha stack WHEN its dashboard's per-run widgets are read
    widgets = _widgets(synth.experiments["alpha"])
    (completed,) = (options["expression"] for *_, options in widgets["Completed by run and status"]["metrics"])
    (reward,) = (options["expression"] for *_, options in widgets["Reward mean by run"]["metrics"])
    # THEN each searches this experiment's metrics with the dimensions the finisher adds for a run, so every run
    # (a free label, never deployed) gets its own line without a change to the stack
    per_run = f"{NAMESPACE},{EXP_DIMENSION},{RUN_DIMENSION}"
    assert completed == (
        f"SEARCH('{{{per_run},{STATUS_DIMENSION}}} MetricName=\"{COMPLETED}\" {EXP_DIMENSION}=\"alpha\"', 'Sum', 60)"
    )
    assert reward == f"SEARCH('{{{per_run}}} MetricName=\"{REWARD}\" {EXP_DIMENSION}=\"alpha\"', 'Average', 60)"


def test_alarm_topic_flag_makes_the_topic_every_alarms_action(synth: Synthesized) -> None:
    # GIVEN alpha-2 deployed with -c alarm_topic_arn=ARN and alpha without
    with_topic = _resources(synth.experiments[SANDBOX_EXPERIMENT], "AWS::CloudWatch::Alarm").values()
    without = _resources(synth.experiments["alpha"], "AWS::CloudWatch::Alarm").values()
    # THEN every alarm of alpha-2 notifies the topic, and alpha's notify nothing
    assert len(with_topic) == 8
    assert all(alarm["Properties"]["AlarmActions"] == [ALARM_TOPIC_ARN] for alarm in with_topic)
    assert not any("AlarmActions" in alarm["Properties"] for alarm in without)


def _metric_names(alarm: dict[str, Any]) -> set[str]:
    if "MetricName" in alarm:
        return {alarm["MetricName"]}
    return {m["MetricStat"]["Metric"]["MetricName"] for m in alarm["Metrics"] if "MetricStat" in m}


def test_two_experiments_deploy_side_by_side_without_collisions(synth: Synthesized) -> None:
    # GIVEN two experiment stacks in one app
    named = {
        "AWS::SQS::Queue": "QueueName",
        "AWS::DynamoDB::Table": "TableName",
        "AWS::Events::Rule": "Name",
        "AWS::SSM::Parameter": "Name",
        "AWS::BedrockAgentCore::Runtime": "AgentRuntimeName",
        "AWS::CloudWatch::Dashboard": "DashboardName",
    }
    # WHEN the physical names of both are collected
    seen: dict[str, list[str]] = {}
    for exp_id, template in synth.experiments.items():
        for kind, field in named.items():
            for resource in _resources(template, kind).values():
                if field in resource["Properties"]:
                    seen.setdefault(str(resource["Properties"][field]), []).append(exp_id)
    # THEN no name is used twice, and each stack holds no data of its own worth keeping
    assert {name: owners for name, owners in seen.items() if len(owners) > 1} == {}
    for template in synth.experiments.values():
        assert template.find_resources("AWS::S3::Bucket") == {}
        assert all(r.get("DeletionPolicy") != "Retain" for r in template.to_json()["Resources"].values())


def test_no_experiment_grant_reaches_another_experiments_prefix(synth: Synthesized) -> None:
    # GIVEN alpha's template WHEN searched for alpha-2's names (alpha's own name is a prefix of them)
    text = json.dumps(synth.experiments["alpha"].to_json())
    # THEN none appear: no grant of alpha's (a prefix ends with '/') covers alpha-2's resources
    assert "alpha-2" not in text and "alpha_2" not in text
    assert experiment_prefix("alpha").endswith("/")


def test_rollouts_doctor_accepts_the_queue_policies_and_rule_pattern_the_stack_deploys(synth: Synthesized) -> None:
    # GIVEN the alpha stack's result rule and the policies of the two queues it targets
    template = synth.experiments["alpha"]
    names = ExperimentResources.for_experiment("alpha")
    rule_id = _logical_id(template, "AWS::Events::Rule", Name=names.result_rule_name)
    rule = _one(template, "AWS::Events::Rule", Name=names.result_rule_name)
    # WHEN the doctor's checks read them (intrinsics rendered as placeholders)
    # THEN each queue policy lets exactly this rule send, and the pattern is the one the doctor expects
    for spec in (names.completion_queue, names.finisher_queue):
        queue_id = _logical_id(template, "AWS::SQS::Queue", QueueName=spec.name)
        policy = _render(_one(template, "AWS::SQS::QueuePolicy", Queues=[{"Ref": queue_id}])["Properties"])
        document = policy["PolicyDocument"]
        assert policy_lets_rule_send(document, f"<{queue_id}.Arn>", f"<{rule_id}.Arn>")
        assert not policy_lets_rule_send(document, f"<{queue_id}.Arn>", "<AnotherRule.Arn>")
    assert _render(rule["Properties"]["EventPattern"]) == result_event_pattern(_bucket(), "alpha")


def test_the_readmes_import_mapping_names_every_retained_resource_with_a_fixed_name(synth: Synthesized) -> None:
    # GIVEN the import mapping the README gives for redeploying the shared stack after `cdk destroy`
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = readme.split("cat > shared-import.json <<EOF\n", 1)[1].split("\nEOF", 1)[0]
    mapping = json.loads(block.replace("$ACCOUNT", "<AWS::AccountId>").replace("$REGION", "<AWS::Region>"))
    # WHEN the shared template's retained resources with a fixed name are listed
    retained = {
        logical_id: {name: _render(value) for name, value in resource["Properties"].items() if name.endswith("Name")}
        for logical_id, resource in synth.shared.to_json()["Resources"].items()
        if resource.get("DeletionPolicy") == "Retain"
        and any(name in resource["Properties"] for name in ("BucketName", "RepositoryName", "TableName"))
    }
    # THEN the mapping names exactly those, by their logical ids and names
    assert mapping == retained


def test_runtime_role_may_write_logs_and_get_workload_tokens_of_this_runtime_only(synth: Synthesized) -> None:
    # GIVEN the runtime's execution role WHEN its log and workload-identity grants are collected
    grants = _grants(_statements(synth.experiments["alpha"], "AgentExecutionRoleDefaultPolicy"))
    this = f"rollout_alpha-{'?' * 10}"
    logs = (
        f"arn:<AWS::Partition>:logs:<AWS::Region>:<AWS::AccountId>:log-group:/aws/bedrock-agentcore/runtimes/{this}-*"
    )
    identities = "arn:<AWS::Partition>:bedrock-agentcore:<AWS::Region>:<AWS::AccountId>:workload-identity-directory"
    # THEN they name this runtime's log groups and workload identity, not every runtime's (the Runtime L2's)
    assert {r for a, r in grants if a in ("logs:CreateLogGroup", "logs:PutLogEvents")} == {logs, f"{logs}:log-stream:*"}
    assert {r for a, r in grants if a == "bedrock-agentcore:GetWorkloadAccessToken"} == {
        f"{identities}/default",
        f"{identities}/default/workload-identity/rollout_alpha-*",
    }
    assert not any("runtimes/*" in r or r.endswith("workload-identity/*") for _, r in grants)
    # AND it may still pull the agent image from the shared repository
    assert any(a == "ecr:BatchGetImage" for a, _ in grants)
