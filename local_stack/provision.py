"""Create the local resources with boto3, from the same definitions the CDK app uses.

moto cannot deploy the synthesized CDK template, so this module turns ``rollout_contract.resources`` into
boto3 calls: the results bucket (with EventBridge notifications), the budget table and, per experiment,
the three queues with their dead-letter queues, the sessions table, the result rule (targeting the
completion and finisher queues: locally every Lambda is fed by a queue) and the descriptor in SSM.
Every step is idempotent: provisioning twice leaves the same resources.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from local_stack.moto_server import DUMMY_CREDENTIALS, LOCAL_REGION
from rollout_contract.aws import ClientFactory, error_code
from rollout_contract.credentials import ExperimentSecret, new_secret_value
from rollout_contract.naming import PROJECT
from rollout_contract.proof import UnprovenResults
from rollout_contract.protocol import DEFAULT_INVOKE_TPS
from rollout_contract.resources import (
    BUDGET_TABLE,
    DEFAULT_SESSION_BUDGET,
    DLQ_RETENTION_S,
    FUNCTION_ROLES,
    LOCAL_RESULTS_BUCKET,
    ExperimentDescriptor,
    ExperimentKind,
    ExperimentResources,
    QueueSpec,
    TableSpec,
    result_event_pattern,
)

if TYPE_CHECKING:
    from types_boto3_dynamodb import DynamoDBClient
    from types_boto3_events import EventBridgeClient
    from types_boto3_s3 import S3Client
    from types_boto3_sqs import SQSClient
    from types_boto3_sqs.literals import QueueAttributeNameType
    from types_boto3_ssm import SSMClient

__all__ = ["AwsClients", "ProvisionedExperiment", "local_function_name", "provision_experiment", "provision_shared"]

COMPLETION_TARGET_ID = "completion-queue"
FINISHER_TARGET_ID = "finisher-queue"


@dataclass(frozen=True)
class AwsClients:
    """The boto3 clients provisioning uses."""

    s3: S3Client
    sqs: SQSClient
    dynamodb: DynamoDBClient
    events: EventBridgeClient
    ssm: SSMClient
    #: Creates the experiment's secrets (D100); ``None``: provisioning creates none (the CDK comparison's moto).
    secretsmanager: Any = None

    @classmethod
    def local(cls, moto_url: str) -> AwsClients:
        """Build clients for the moto server at ``moto_url`` (dummy credentials, the local region)."""
        names = ("s3", "sqs", "dynamodb", "events", "ssm", "secretsmanager")
        factory = ClientFactory(
            region=LOCAL_REGION, endpoints=dict.fromkeys(names, moto_url), credentials=DUMMY_CREDENTIALS
        )
        session = factory.session()
        return cls(
            s3=factory.client("s3", session=session),
            sqs=factory.client("sqs", session=session),
            dynamodb=factory.client("dynamodb", session=session),
            events=factory.client("events", session=session),
            ssm=factory.client("ssm", session=session),
            secretsmanager=factory.client("secretsmanager", session=session),
        )


@dataclass(frozen=True)
class ProvisionedExperiment:
    """What provisioning created for one experiment."""

    descriptor: ExperimentDescriptor
    finisher_queue_url: str


def local_function_name(exp_id: str, role: str) -> str:
    """Name of experiment ``exp_id``'s ``role`` function as the local worker plays it (and its metrics name it)."""
    return f"{PROJECT}-{exp_id}-{role}"


def provision_shared(clients: AwsClients, *, bucket: str = LOCAL_RESULTS_BUCKET) -> None:
    """Create the shared resources: the results bucket with EventBridge notifications, and the budget table."""
    try:
        clients.s3.create_bucket(Bucket=bucket)
    except ClientError as exc:
        if error_code(exc) not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
            raise
    clients.s3.put_bucket_notification_configuration(
        Bucket=bucket, NotificationConfiguration={"EventBridgeConfiguration": {}}
    )
    _ensure_table(clients.dynamodb, BUDGET_TABLE)


def provision_experiment(
    clients: AwsClients,
    exp_id: str,
    *,
    region: str,
    runtime_arn: str,
    endpoints: dict[str, str],
    gateway_url: str | None = None,
    model_id: str | None = None,
    required_rollout_fields: tuple[str, ...] = (),
    unproven_results: UnprovenResults = UnprovenResults.REJECT,
    bucket: str = LOCAL_RESULTS_BUCKET,
    kind: ExperimentKind = ExperimentKind.AGENT,
    tps_limit: float = DEFAULT_INVOKE_TPS,
    session_budget: int = DEFAULT_SESSION_BUDGET,
    runtime_endpoints: int = 1,
) -> ProvisionedExperiment:
    """Create experiment ``exp_id``'s queues, sessions table and result rule, and publish its descriptor.

    Call :func:`provision_shared` first. ``endpoints`` (boto3 service name -> URL) goes into the
    descriptor, so ``RolloutClient.for_experiment(exp_id)`` finds the local stack; so do what the runtime hosts
    (``kind``) and the budgets the experiment's functions keep (``tps_limit`` per endpoint of ``runtime_endpoints``,
    ``session_budget``).
    """
    resources = ExperimentResources.for_experiment(exp_id)
    dispatch_url = _ensure_queue(clients.sqs, resources.dispatch_queue)
    completion_url = _ensure_queue(clients.sqs, resources.completion_queue)
    finisher_url = _ensure_queue(clients.sqs, resources.finisher_queue)
    _ensure_table(clients.dynamodb, resources.sessions_table)
    _ensure_result_rule(
        clients,
        resources,
        bucket=bucket,
        targets={COMPLETION_TARGET_ID: completion_url, FINISHER_TARGET_ID: finisher_url},
    )
    descriptor = ExperimentDescriptor(
        exp_id=exp_id,
        region=region,
        results_bucket=bucket,
        dispatch_queue_url=dispatch_url,
        completion_queue_url=completion_url,
        sessions_table=resources.sessions_table.name,
        budget_table=BUDGET_TABLE.name,
        runtime_arn=runtime_arn,
        gateway_url=gateway_url,
        model_id=model_id,
        required_rollout_fields=list(required_rollout_fields),
        unproven_results=unproven_results,
        endpoints=endpoints,
        function_names={role: local_function_name(exp_id, role) for role in FUNCTION_ROLES},
        kind=kind,
        tps_limit=tps_limit,
        session_budget=session_budget,
        runtime_endpoints=runtime_endpoints,
    )
    if clients.secretsmanager is not None:
        _ensure_secrets(clients.secretsmanager, exp_id)
    clients.ssm.put_parameter(
        Name=resources.descriptor_parameter,
        Value=descriptor.model_dump_json(),
        Type="String",
        Overwrite=True,
        Description=f"Local stack descriptor of experiment {exp_id}",
    )
    return ProvisionedExperiment(descriptor=descriptor, finisher_queue_url=finisher_url)


def _ensure_secrets(secretsmanager: Any, exp_id: str) -> None:
    """Create the experiment's secrets with random values, as its stack does; existing ones are kept."""
    for secret in ExperimentSecret:
        try:
            secretsmanager.create_secret(Name=secret.secret_name(exp_id), SecretString=new_secret_value())
        except ClientError as exc:
            if error_code(exc) != "ResourceExistsException":
                raise


def _queue_arn(sqs: SQSClient, url: str) -> str:
    return sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]


def _create_or_update_queue(sqs: SQSClient, name: str, attributes: Mapping[QueueAttributeNameType, str]) -> str:
    try:
        return sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
    except ClientError as exc:
        if error_code(exc) not in ("QueueAlreadyExists", "QueueNameExists"):
            raise
    url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
    sqs.set_queue_attributes(QueueUrl=url, Attributes=attributes)
    return url


def _ensure_queue(sqs: SQSClient, spec: QueueSpec) -> str:
    """Create ``spec``'s dead-letter queue and the queue redriving into it; return the queue URL."""
    dlq_url = _create_or_update_queue(sqs, spec.dlq_name, {"MessageRetentionPeriod": str(DLQ_RETENTION_S)})
    redrive = {"deadLetterTargetArn": _queue_arn(sqs, dlq_url), "maxReceiveCount": spec.max_receive_count}
    return _create_or_update_queue(
        sqs,
        spec.name,
        {
            "VisibilityTimeout": str(spec.visibility_timeout_s),
            "MessageRetentionPeriod": str(spec.retention_s),
            "RedrivePolicy": json.dumps(redrive),
        },
    )


def _ensure_table(dynamodb: DynamoDBClient, spec: TableSpec) -> None:
    """Create ``spec``'s on-demand table with its indexes (S partition, N sort, projection ALL) and TTL."""
    try:
        dynamodb.describe_table(TableName=spec.name)
    except ClientError as exc:
        if error_code(exc) != "ResourceNotFoundException":
            raise
        dynamodb.create_table(**spec.create_table_request())
        # botocore sleeps for any number of seconds; its stubs type the delay as an int.
        waiter = {"Delay": 0.1, "MaxAttempts": 50}
        dynamodb.get_waiter("table_exists").wait(TableName=spec.name, WaiterConfig=waiter)  # type: ignore[arg-type]
    ttl = dynamodb.describe_time_to_live(TableName=spec.name)["TimeToLiveDescription"]
    if ttl.get("TimeToLiveStatus") not in ("ENABLED", "ENABLING"):
        dynamodb.update_time_to_live(
            TableName=spec.name,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": spec.ttl_attribute},
        )


def _ensure_result_rule(
    clients: AwsClients, resources: ExperimentResources, *, bucket: str, targets: dict[str, str]
) -> None:
    """Route the experiment's result events to each target queue (and let EventBridge send to them)."""
    rule_arn = clients.events.put_rule(
        Name=resources.result_rule_name,
        EventPattern=json.dumps(result_event_pattern(bucket, resources.exp_id)),
        State="ENABLED",
        Description=f"Result objects of experiment {resources.exp_id}",
    )["RuleArn"]
    target_arns = {target_id: _queue_arn(clients.sqs, url) for target_id, url in targets.items()}
    for target_id, url in targets.items():
        policy = {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "AllowResultRule",
                    "Effect": "Allow",
                    "Principal": {"Service": "events.amazonaws.com"},
                    "Action": "sqs:SendMessage",
                    "Resource": target_arns[target_id],
                    "Condition": {"ArnEquals": {"aws:SourceArn": rule_arn}},
                }
            ],
        }
        clients.sqs.set_queue_attributes(QueueUrl=url, Attributes={"Policy": json.dumps(policy)})
    clients.events.put_targets(
        Rule=resources.result_rule_name,
        Targets=[{"Id": target_id, "Arn": arn} for target_id, arn in target_arns.items()],
    )
