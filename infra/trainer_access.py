"""What a trainer may do with one experiment, as a role the experiment stack owns.

Trainers assume the role (an AWS profile with ``role_arn``, README "Deploying to AWS") instead of having a
managed policy attached to their own users or roles: nothing outside the stack refers to it, so
``cdk destroy`` always works, and its generated name never collides across regions or experiments.
"""

from __future__ import annotations

from aws_cdk import ArnFormat, Duration, Stack
from aws_cdk import aws_bedrockagentcore as agentcore
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from infra.nag import acknowledge, nag_arn
from infra.workers import PAYLOAD_KEYS, RESULT_KEYS, RUNTIME_ENDPOINTS, STOP_SESSION
from rollout_contract.budgets import SESSION_BUDGET_ID, tps_budget_id
from rollout_contract.keys import experiment_prefix, payload_ref_prefix
from rollout_contract.metrics import alarm_name_prefix
from rollout_contract.protocol import DEFAULT_QUALIFIER, endpoint_qualifiers
from rollout_contract.resources import BUDGET_TABLE, SESSIONS_PARTITION_KEY, TTL_ATTRIBUTE, TableSpec
from rollout_contract.sandbox import SANDBOX_SESSION_PREFIX
from rollout_contract.sessions import ATTR_ALIVE_UNTIL, ATTR_TRAINER

INVOKE_RUNTIME = "bedrock-agentcore:InvokeAgentRuntime"
#: What ``trainer_client.sandbox`` calls on a budget item: the free slot count, and updates (a transaction is
#: authorized as its updates). Of a sandbox's sessions item it reads (``ReadRolloutStatus`` covers) and updates.
BUDGET_ITEM_CALLS = ["dynamodb:GetItem", "dynamodb:UpdateItem"]
#: How long one assumed-role session lasts; boto3 renews it on its own for a profile with ``role_arn``.
TRAINER_SESSION = Duration.hours(12)


class TrainerAccess(Construct):
    """A role any principal of this account may assume (when its own policy allows ``sts:AssumeRole``).

    It may submit rollouts, receive completions, read results and the descriptor, park oversized payloads,
    and read rollout status and queue depths: of this experiment only.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        exp_id: str,
        dispatch_queue: sqs.IQueue,
        completion_queue: sqs.IQueue,
        dead_letter_queues: list[sqs.IQueue],
        bucket: s3.IBucket,
        descriptor: ssm.IStringParameter,
        sessions_table: dynamodb.ITable,
        sessions_spec: TableSpec,
    ) -> None:
        super().__init__(scope, construct_id)
        self._sessions_table_arn = sessions_table.table_arn
        results = bucket.arn_for_objects(f"{experiment_prefix(exp_id)}*")
        stack = Stack.of(self)
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.AccountRootPrincipal(),
            description=f"Assumed by trainer processes of experiment {exp_id}",
            max_session_duration=TRAINER_SESSION,
        )
        self.policy = iam.Policy(
            self,
            "Policy",
            roles=[self.role],
            statements=[
                iam.PolicyStatement(
                    sid="SubmitRollouts",
                    actions=["sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"],
                    resources=[dispatch_queue.queue_arn],
                ),
                iam.PolicyStatement(
                    sid="ReceiveCompletions",
                    actions=[
                        "sqs:ReceiveMessage",
                        "sqs:DeleteMessage",
                        "sqs:ChangeMessageVisibility",
                        "sqs:GetQueueAttributes",
                        "sqs:GetQueueUrl",
                    ],
                    resources=[completion_queue.queue_arn],
                ),
                iam.PolicyStatement(sid="ReadResults", actions=["s3:GetObject"], resources=[results]),
                iam.PolicyStatement(
                    sid="ParkLargePayloads",
                    actions=["s3:PutObject"],
                    resources=[bucket.arn_for_objects(f"{payload_ref_prefix(exp_id)}*")],
                ),
                iam.PolicyStatement(
                    sid="ReadDescriptor", actions=["ssm:GetParameter"], resources=[descriptor.parameter_arn]
                ),
                iam.PolicyStatement(
                    sid="ListResults",
                    actions=["s3:ListBucket"],
                    resources=[bucket.bucket_arn],
                    conditions={"StringLike": {"s3:prefix": [f"{experiment_prefix(exp_id)}*"]}},
                ),
                iam.PolicyStatement(
                    sid="ReadQueueDepths",
                    actions=["sqs:GetQueueAttributes", "sqs:GetQueueUrl"],
                    resources=[queue.queue_arn for queue in dead_letter_queues],
                ),
                iam.PolicyStatement(
                    # The trainer's lease item and its claim on attached rollouts (trainer_client._owners): updates
                    # that touch no attribute but the key, the trainer, the lease and the TTL, and return nothing.
                    sid="OwnRollouts",
                    actions=["dynamodb:UpdateItem"],
                    resources=[sessions_table.table_arn],
                    conditions={
                        "ForAllValues:StringEquals": {
                            "dynamodb:Attributes": [
                                SESSIONS_PARTITION_KEY,
                                ATTR_TRAINER,
                                ATTR_ALIVE_UNTIL,
                                TTL_ATTRIBUTE,
                            ]
                        },
                        "StringEqualsIfExists": {"dynamodb:ReturnValues": ["NONE"]},
                    },
                ),
                iam.PolicyStatement(
                    # A rollout's item (its trainer, a lease, a future past its deadline), 100 at a time.
                    sid="ReadRolloutStatus",
                    actions=["dynamodb:GetItem", "dynamodb:BatchGetItem"],
                    resources=[sessions_table.table_arn],
                ),
                iam.PolicyStatement(
                    # Rollouts in flight (`rollouts status`, `RolloutClient.status`).
                    sid="ListRolloutsInFlight",
                    actions=["dynamodb:Query"],
                    resources=[f"{sessions_table.table_arn}/index/{index.name}" for index in sessions_spec.indexes],
                ),
                # `rollouts sessions --queued` and `rollouts cancel --all|--input-id`: queued rollouts are in no index.
                iam.PolicyStatement(
                    sid="ListQueuedRollouts", actions=["dynamodb:Scan"], resources=[sessions_table.table_arn]
                ),
                # `rollouts top`: the account's session count against the budget, and the experiment's alarms.
                iam.PolicyStatement(
                    sid="ReadSessionBudget",
                    actions=["dynamodb:GetItem"],
                    resources=[stack.format_arn(service="dynamodb", resource="table", resource_name=BUDGET_TABLE.name)],
                    conditions={"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [SESSION_BUDGET_ID]}},
                ),
                iam.PolicyStatement(
                    sid="ReadAlarmStates",
                    actions=["cloudwatch:DescribeAlarms"],
                    resources=[
                        stack.format_arn(
                            service="cloudwatch",
                            resource="alarm",
                            resource_name=f"{alarm_name_prefix(exp_id)}*",
                            arn_format=ArnFormat.COLON_RESOURCE_NAME,
                        )
                    ],
                ),
            ],
        )
        alarms = nag_arn(self, "cloudwatch", f"alarm:{alarm_name_prefix(exp_id)}*")
        acknowledge(self.policy, f"AwsSolutions-IAM5[Resource::{alarms}]", "Reads the experiment's alarm states.")

    def grant_sandboxes(
        self, *, runtime: agentcore.IBedrockAgentRuntime, budget_table: dynamodb.ITable, endpoints: int
    ) -> None:
        """Let the trainer run sandboxes (D71): start, invoke and stop the runtime's sessions on its ``endpoints``
        endpoints, record sandbox sessions (ids starting with ``sandbox-``) in the sessions table, and take session
        slots and invoke tokens from the shared budget table's items this experiment uses (the session budget and
        each endpoint's invoke budget, D98), as the functions do."""
        arn = runtime.agent_runtime_arn
        qualifiers = endpoint_qualifiers(DEFAULT_QUALIFIER, endpoints)
        budget_items = [SESSION_BUDGET_ID, *(tps_budget_id(arn, qualifier) for qualifier in qualifiers)]
        self.policy.add_statements(
            iam.PolicyStatement(
                sid="RunSandboxes", actions=[INVOKE_RUNTIME, STOP_SESSION], resources=[arn, f"{arn}/*"]
            ),
            iam.PolicyStatement(
                sid="RecordSandboxes",
                actions=["dynamodb:UpdateItem"],
                resources=[self._sessions_table_arn],
                conditions={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{SANDBOX_SESSION_PREFIX}*"]}},
            ),
            iam.PolicyStatement(
                sid="SpendBudgets",
                actions=BUDGET_ITEM_CALLS,
                resources=[budget_table.table_arn],
                conditions={"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": budget_items}},
            ),
        )

    def acknowledge_wildcards(self, *, results: str, payloads: str, runtime_endpoints: str | None = None) -> None:
        """Accept the IAM5 wildcards (cdk-nag finding ids) that are the least privilege IAM can express."""
        acknowledge(self.policy, results, f"Reads results. {RESULT_KEYS}")
        acknowledge(self.policy, payloads, PAYLOAD_KEYS)
        if runtime_endpoints is not None:
            acknowledge(self.policy, runtime_endpoints, RUNTIME_ENDPOINTS)
