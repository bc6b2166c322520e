"""The three rollout functions of an experiment: what triggers them and what each may touch."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_bedrockagentcore as agentcore
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.functions import HandlerPackage, RolloutFunction
from infra.nag import acknowledge
from infra.queues import RolloutQueue
from infra.settings import ExperimentSettings
from rollout_contract.budgets import SESSION_BUDGET_ID, tps_budget_id
from rollout_contract.keys import experiment_prefix, payload_ref_prefix
from rollout_contract.protocol import DEFAULT_QUALIFIER, endpoint_qualifiers

#: Lambda's limit for an SQS event source batch on a standard queue without a batching window.
SQS_BATCH_SIZE = 10
#: No batching window: Lambda's pollers invoke as soon as a long poll returns messages (docs/architecture.md,
#: "Latency budget"); a window would add up to its length to every dispatch and every finish.
SQS_BATCHING_WINDOW = Duration.seconds(0)
DISPATCHER_TIMEOUT = Duration.seconds(60)
FINISHER_TIMEOUT = Duration.seconds(60)
SWEEPER_TIMEOUT = Duration.seconds(55)
SWEEP_RATE = Duration.minutes(1)
STOP_SESSION = "bedrock-agentcore:StopRuntimeSession"
#: S3 refuses a put of an existing key that carries ``If-None-Match: *``; this condition refuses a put without it.
FIRST_WRITER_WINS = {"StringEquals": {"s3:if-none-match": "*"}}
#: What each function calls on a sessions item and on a budget item (a transaction is authorized as its updates),
#: as the recorded calls show (tests/e2e/test_e2e_iam.py): the dispatcher reads a redelivered rollout's item and the
#: slot count while it waits for a slot, the sweeper the slot count it reconciles; the finisher only updates.
SESSIONS_CALLS = {
    "dispatcher": ["dynamodb:GetItem", "dynamodb:UpdateItem"],
    "finisher": ["dynamodb:UpdateItem"],
    "sweeper": ["dynamodb:UpdateItem"],
}
BUDGET_CALLS = {
    "dispatcher": ["dynamodb:GetItem", "dynamodb:UpdateItem"],
    "finisher": ["dynamodb:UpdateItem"],
    "sweeper": ["dynamodb:GetItem", "dynamodb:UpdateItem"],
}
#: Why a grant on the runtime covers ``ARN/*`` (quoted in the cdk-nag acknowledgements).
RUNTIME_ENDPOINTS = (
    "ACR authorizes InvokeAgentRuntime/StopRuntimeSession on the runtime ARN and its endpoints (ARN/*); both are "
    "this experiment's runtime only."
)
#: Why the results prefix is the narrowest S3 scope (quoted in the cdk-nag acknowledgements).
RESULT_KEYS = "Keys are {exp_id}/{input_id}/{session_id}.json: the experiment's prefix is the narrowest scope."
PAYLOAD_KEYS = "Oversized payloads are parked per rollout under the experiment's prefix."


class RolloutWorkers(Construct):
    """Dispatcher (dispatch queue), finisher (finisher queue) and sweeper (every minute), least privilege.

    Each function has its own role; the grants below are all it holds besides its log group.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: ExperimentSettings,
        environment: dict[str, str],
        runtime: agentcore.IBedrockAgentRuntime,
        dispatch: RolloutQueue,
        finisher_inbox: RolloutQueue,
        sessions_table: dynamodb.ITable,
        budget_table: dynamodb.ITable,
        bucket: s3.IBucket,
    ) -> None:
        super().__init__(scope, construct_id)
        exp_id = settings.exp_id
        package = HandlerPackage(self, "HandlerPackage")

        def function(
            name: str, handler: str, timeout: Duration, description: str, reserved: int | None = None
        ) -> RolloutFunction:
            return RolloutFunction(
                self,
                name,
                package=package,
                handler=handler,
                description=f"{exp_id}: {description}",
                environment=environment,
                timeout=timeout,
                reserved_concurrency=reserved,
            )

        self.dispatcher = function(
            "Dispatcher",
            "lambdas.dispatcher.handler",
            DISPATCHER_TIMEOUT,
            "Starts rollouts: dispatch queue -> InvokeAgentRuntime under the TPS and session budgets",
            settings.dispatcher_reserved_concurrency,
        )
        self.finisher = function(
            "Finisher",
            "lambdas.finisher.handler",
            FINISHER_TIMEOUT,
            "Ends rollouts on their result event: StopRuntimeSession, bookkeeping, metrics",
        )
        self.sweeper = function(
            "Sweeper",
            "lambdas.sweeper.handler",
            SWEEPER_TIMEOUT,
            "Ends rollouts past their deadline as timed_out (scheduled every minute)",
        )
        self.all = {"dispatcher": self.dispatcher, "finisher": self.finisher, "sweeper": self.sweeper}
        self.dispatcher.function.add_event_source(
            _sqs_event_source(dispatch, max_concurrency=settings.dispatcher_max_concurrency)
        )
        self.finisher.function.add_event_source(_sqs_event_source(finisher_inbox))
        self.sweep_schedule = events.Rule(
            self,
            "SweepSchedule",
            description=f"Runs the sweeper of experiment {exp_id}",
            schedule=events.Schedule.rate(SWEEP_RATE),
            targets=[targets.LambdaFunction(self.sweeper.function)],
        )
        self._grant(settings, runtime, dispatch, sessions_table, budget_table, bucket)

    def _grant(
        self,
        settings: ExperimentSettings,
        runtime: agentcore.IBedrockAgentRuntime,
        dispatch: RolloutQueue,
        sessions_table: dynamodb.ITable,
        budget_table: dynamodb.ITable,
        bucket: s3.IBucket,
    ) -> None:
        exp_id = settings.exp_id
        results = bucket.arn_for_objects(f"{experiment_prefix(exp_id)}*")
        payloads = bucket.arn_for_objects(f"{payload_ref_prefix(exp_id)}*")
        runtime_resources = [runtime.agent_runtime_arn, f"{runtime.agent_runtime_arn}/*"]
        runtime.grant_invoke_runtime(self.dispatcher.role)
        # The budget table is shared by every experiment: each function may read or update (no put, delete or
        # scan) the account's session count and its own runtime endpoints' invoke budgets, and no other item.
        qualifiers = endpoint_qualifiers(DEFAULT_QUALIFIER, settings.endpoints)
        budget_items = [SESSION_BUDGET_ID, *(tps_budget_id(runtime.agent_runtime_arn, q) for q in qualifiers)]
        for name, worker in self.all.items():
            worker.role.add_to_policy(iam.PolicyStatement(actions=[STOP_SESSION], resources=runtime_resources))
            worker.role.add_to_policy(
                iam.PolicyStatement(actions=SESSIONS_CALLS[name], resources=[sessions_table.table_arn])
            )
            worker.role.add_to_policy(
                iam.PolicyStatement(
                    actions=BUDGET_CALLS[name],
                    resources=[budget_table.table_arn],
                    conditions={"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": budget_items}},
                )
            )
        # The sweeper finds overdue rollouts and counts those in flight on the sessions table's in-flight index.
        self.sweeper.role.add_to_policy(
            iam.PolicyStatement(actions=["dynamodb:Query"], resources=[f"{sessions_table.table_arn}/index/*"])
        )
        # Writers put results first-writer-wins (a put without If-None-Match is refused) and read back the winner
        # when they lose the race.
        for writer in (self.dispatcher, self.sweeper):
            writer.role.add_to_policy(
                iam.PolicyStatement(actions=["s3:PutObject"], resources=[results], conditions=FIRST_WRITER_WINS)
            )
            writer.role.add_to_policy(iam.PolicyStatement(actions=["s3:GetObject"], resources=[results]))
        self.finisher.role.add_to_policy(iam.PolicyStatement(actions=["s3:GetObject"], resources=[results]))
        self.dispatcher.role.add_to_policy(iam.PolicyStatement(actions=["s3:GetObject"], resources=[payloads]))
        # Unparseable dispatch messages go straight to the dead-letter queue (no retry can fix them).
        self.dispatcher.role.add_to_policy(
            iam.PolicyStatement(actions=["sqs:SendMessage"], resources=[dispatch.dead_letter_queue.queue_arn])
        )
        # The dispatcher lists a result key to skip finished rollouts (a HEAD of a missing key would need
        # ListBucket on the whole shared bucket to answer 404 rather than 403).
        self.dispatcher.role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:ListBucket"],
                resources=[bucket.bucket_arn],
                conditions={
                    "StringLike": {"s3:prefix": [f"{experiment_prefix(exp_id)}*", f"{payload_ref_prefix(exp_id)}*"]}
                },
            )
        )

    def acknowledge_wildcards(self, *, results: str, payloads: str, runtime_endpoints: str, index: str) -> None:
        """Accept the IAM5 wildcards (cdk-nag finding ids) that are the least privilege IAM can express."""
        for writer in (self.dispatcher, self.sweeper):
            acknowledge(writer.role, results, f"Writes results. {RESULT_KEYS}")
        acknowledge(self.finisher.role, results, f"Reads results. {RESULT_KEYS}")
        acknowledge(self.dispatcher.role, payloads, PAYLOAD_KEYS)
        for worker in self.all.values():
            acknowledge(
                worker.role,
                runtime_endpoints,
                RUNTIME_ENDPOINTS,
            )
        acknowledge(
            self.sweeper.role,
            index,
            "The sweeper queries the sessions table's in-flight index; the grant covers this table's indexes only.",
        )


def _sqs_event_source(queue: RolloutQueue, *, max_concurrency: int | None = None) -> event_sources.SqsEventSource:
    """Lambda's SQS poller for ``queue``: full batches, no batching window, failed records reported one by one."""
    return event_sources.SqsEventSource(
        queue.queue,
        batch_size=SQS_BATCH_SIZE,
        max_batching_window=SQS_BATCHING_WINDOW,
        report_batch_item_failures=True,
        max_concurrency=max_concurrency,
    )
