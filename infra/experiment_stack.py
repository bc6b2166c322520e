"""One experiment: runtime, queues, result rule, sessions table, Lambdas, dashboard, trainer policy."""

from __future__ import annotations

from aws_cdk import Aws, CfnOutput, Duration, RemovalPolicy, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from infra.functions import HandlerPackage, RolloutFunction
from infra.monitoring import Monitoring
from infra.nag import acknowledge
from infra.queues import RolloutQueue
from infra.runtime import AgentRuntime
from infra.settings import ExperimentSettings
from infra.tables import contract_table
from rollout_contract.keys import experiment_prefix, payload_ref_prefix
from rollout_contract.resources import (
    AGENT_REPOSITORY_NAME,
    BUDGET_TABLE,
    ExperimentDescriptor,
    ExperimentResources,
    HandlerSettings,
    result_event_pattern,
    results_bucket_name,
)

#: Lambda's limit for an SQS event source batch on a standard queue without a batching window.
SQS_BATCH_SIZE = 10
#: EventBridge's maxima: deliveries to a target queue are retried for a day before going to its DLQ.
TARGET_RETRY_ATTEMPTS = 185
TARGET_MAX_EVENT_AGE = Duration.hours(24)
DISPATCHER_TIMEOUT = Duration.seconds(60)
FINISHER_TIMEOUT = Duration.seconds(60)
SWEEPER_TIMEOUT = Duration.seconds(55)
SWEEP_RATE = Duration.minutes(1)
STOP_SESSION = "bedrock-agentcore:StopRuntimeSession"


class ExperimentStack(Stack):
    """Everything one experiment needs; results stay in the shared bucket when this stack is destroyed.

    Shared resources (results bucket, agent repository, budget table) are referenced by their
    contract names, so experiments never hold CloudFormation exports of the shared stack.
    """

    def __init__(self, scope: Construct, construct_id: str, *, settings: ExperimentSettings, **kwargs: object) -> None:
        super().__init__(scope, construct_id, **kwargs)
        exp_id = settings.exp_id
        self.names = names = ExperimentResources.for_experiment(exp_id)
        self.results_bucket = bucket = s3.Bucket.from_bucket_name(
            self, "ResultsBucket", results_bucket_name(self.account, self.region)
        )
        self.budget_table = budget_table = dynamodb.Table.from_table_name(self, "BudgetTable", BUDGET_TABLE.name)

        self.agent = AgentRuntime(
            self,
            "Agent",
            runtime_name=names.runtime_name,
            image=settings.image,
            repository=ecr.Repository.from_repository_name(self, "AgentRepository", AGENT_REPOSITORY_NAME),
            idle_timeout_s=settings.idle_timeout_s,
            max_lifetime_s=settings.max_lifetime_s,
            environment=dict(settings.agent_environment),
            vpc=settings.vpc,
        )
        runtime = self.agent.runtime
        self.dispatch = RolloutQueue(self, "DispatchQueue", spec=names.dispatch_queue)
        self.completions = RolloutQueue(self, "CompletionQueue", spec=names.completion_queue)
        self.finisher_inbox = RolloutQueue(self, "FinisherQueue", spec=names.finisher_queue)
        self.sessions_table = contract_table(
            self, "SessionsTable", spec=names.sessions_table, removal_policy=RemovalPolicy.DESTROY
        )

        pattern = result_event_pattern(bucket.bucket_name, exp_id)
        self.result_rule = events.Rule(
            self,
            "ResultRule",
            rule_name=names.result_rule_name,
            description=f"Result objects of experiment {exp_id} -> completion and finisher queues",
            event_pattern=events.EventPattern(
                source=pattern["source"], detail_type=pattern["detail-type"], detail=pattern["detail"]
            ),
        )
        for inbox in (self.completions, self.finisher_inbox):
            self.result_rule.add_target(
                targets.SqsQueue(
                    inbox.queue,
                    dead_letter_queue=inbox.dead_letter_queue,
                    retry_attempts=TARGET_RETRY_ATTEMPTS,
                    max_event_age=TARGET_MAX_EVENT_AGE,
                )
            )

        handler_env = HandlerSettings(
            exp_id=exp_id,
            results_bucket=bucket.bucket_name,
            sessions_table=self.sessions_table.table_name,
            budget_table=BUDGET_TABLE.name,
            runtime_arn=runtime.agent_runtime_arn,
            dispatch_queue_url=self.dispatch.queue.queue_url,
            tps_limit=settings.tps_limit,
            session_budget=settings.session_budget,
        ).to_env()
        package = HandlerPackage(self, "HandlerPackage", powertools_version=settings.powertools_layer_version)
        self.dispatcher = self._function(
            "Dispatcher",
            package,
            handler_env,
            "lambdas.dispatcher.handler",
            DISPATCHER_TIMEOUT,
            "Starts rollouts: dispatch queue -> InvokeAgentRuntime under the TPS and session budgets",
            reserved_concurrency=settings.dispatcher_reserved_concurrency,
        )
        self.finisher = self._function(
            "Finisher",
            package,
            handler_env,
            "lambdas.finisher.handler",
            FINISHER_TIMEOUT,
            "Ends rollouts on their result event: StopRuntimeSession, bookkeeping, metrics",
        )
        self.sweeper = self._function(
            "Sweeper",
            package,
            handler_env,
            "lambdas.sweeper.handler",
            SWEEPER_TIMEOUT,
            "Ends rollouts past their deadline as timed_out (scheduled every minute)",
        )
        self.dispatcher.function.add_event_source(
            event_sources.SqsEventSource(
                self.dispatch.queue,
                batch_size=SQS_BATCH_SIZE,
                report_batch_item_failures=True,
                max_concurrency=settings.dispatcher_max_concurrency,
            )
        )
        self.finisher.function.add_event_source(
            event_sources.SqsEventSource(
                self.finisher_inbox.queue, batch_size=SQS_BATCH_SIZE, report_batch_item_failures=True
            )
        )
        self.sweep_schedule = events.Rule(
            self,
            "SweepSchedule",
            description=f"Runs the sweeper of experiment {exp_id}",
            schedule=events.Schedule.rate(SWEEP_RATE),
            targets=[targets.LambdaFunction(self.sweeper.function)],
        )

        results = bucket.arn_for_objects(f"{experiment_prefix(exp_id)}*")
        payloads = bucket.arn_for_objects(f"{payload_ref_prefix(exp_id)}*")
        runtime_resources = [runtime.agent_runtime_arn, f"{runtime.agent_runtime_arn}/*"]
        runtime.add_to_role_policy(iam.PolicyStatement(actions=["s3:PutObject"], resources=[results]))
        runtime.grant_invoke_runtime(self.dispatcher.role)
        for worker in (self.dispatcher, self.finisher, self.sweeper):
            worker.role.add_to_policy(iam.PolicyStatement(actions=[STOP_SESSION], resources=runtime_resources))
            self.sessions_table.grant_read_write_data(worker.role)
            budget_table.grant_read_write_data(worker.role)
        # Writers put results first-writer-wins and read back the winner when they lose the race.
        for writer in (self.dispatcher, self.sweeper):
            writer.role.add_to_policy(
                iam.PolicyStatement(actions=["s3:PutObject", "s3:GetObject"], resources=[results])
            )
        self.finisher.role.add_to_policy(iam.PolicyStatement(actions=["s3:GetObject"], resources=[results]))
        self.dispatcher.role.add_to_policy(iam.PolicyStatement(actions=["s3:GetObject"], resources=[payloads]))
        # Unparseable dispatch messages go straight to the dead-letter queue (no retry can fix them).
        self.dispatcher.role.add_to_policy(
            iam.PolicyStatement(actions=["sqs:SendMessage"], resources=[self.dispatch.dead_letter_queue.queue_arn])
        )
        # The dispatcher HEADs a result key to skip finished rollouts: without ListBucket S3 answers 403, not 404.
        self.dispatcher.role.add_to_policy(
            iam.PolicyStatement(actions=["s3:ListBucket"], resources=[bucket.bucket_arn])
        )

        descriptor = ExperimentDescriptor(
            exp_id=exp_id,
            region=self.region,
            results_bucket=bucket.bucket_name,
            dispatch_queue_url=self.dispatch.queue.queue_url,
            completion_queue_url=self.completions.queue.queue_url,
            sessions_table=self.sessions_table.table_name,
            budget_table=BUDGET_TABLE.name,
            runtime_arn=runtime.agent_runtime_arn,
            gateway_url=settings.gateway_url,
        )
        self.descriptor_parameter = ssm.StringParameter(
            self,
            "Descriptor",
            parameter_name=names.descriptor_parameter,
            description=f"ExperimentDescriptor of {exp_id}: what RolloutClient.for_experiment reads",
            string_value=self.to_json_string(descriptor.model_dump(mode="json")),
        )
        self.trainer_policy = iam.ManagedPolicy(
            self,
            "TrainerPolicy",
            managed_policy_name=names.trainer_policy_name,
            description=f"What a trainer process needs to run rollouts of experiment {exp_id}",
            statements=[
                iam.PolicyStatement(
                    sid="SubmitRollouts",
                    actions=["sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"],
                    resources=[self.dispatch.queue.queue_arn],
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
                    resources=[self.completions.queue.queue_arn],
                ),
                iam.PolicyStatement(sid="ReadResults", actions=["s3:GetObject"], resources=[results]),
                iam.PolicyStatement(sid="ParkLargePayloads", actions=["s3:PutObject"], resources=[payloads]),
                iam.PolicyStatement(
                    sid="ReadDescriptor",
                    actions=["ssm:GetParameter"],
                    resources=[self.descriptor_parameter.parameter_arn],
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
                    resources=[self.dispatch.dead_letter_queue.queue_arn, self.completions.dead_letter_queue.queue_arn],
                ),
                iam.PolicyStatement(
                    sid="ReadRolloutStatus",
                    actions=["dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query"],
                    resources=[
                        self.sessions_table.table_arn,
                        *(
                            f"{self.sessions_table.table_arn}/index/{index.name}"
                            for index in names.sessions_table.indexes
                        ),
                    ],
                ),
            ],
        )

        self.monitoring = Monitoring(
            self,
            "Monitoring",
            exp_id=exp_id,
            dashboard_name=names.dashboard_name,
            runtime=runtime,
            dispatch_queue=self.dispatch.queue,
            dead_letter_queues={
                "dispatch": self.dispatch.dead_letter_queue,
                "completion": self.completions.dead_letter_queue,
                "finisher": self.finisher_inbox.dead_letter_queue,
            },
            functions={
                "dispatcher": self.dispatcher.function,
                "finisher": self.finisher.function,
                "sweeper": self.sweeper.function,
            },
            max_lifetime_s=settings.max_lifetime_s,
        )

        outputs = {
            "DescriptorParameterName": self.descriptor_parameter.parameter_name,
            "TrainerPolicyArn": self.trainer_policy.managed_policy_arn,
            "RuntimeArn": runtime.agent_runtime_arn,
            "ResultsBucketName": bucket.bucket_name,
            "DispatchQueueUrl": self.dispatch.queue.queue_url,
            "CompletionQueueUrl": self.completions.queue.queue_url,
            "SessionsTableName": self.sessions_table.table_name,
            "BudgetTableName": BUDGET_TABLE.name,
            "DashboardName": self.monitoring.dashboard.dashboard_name,
        }
        for name, value in outputs.items():
            CfnOutput(self, name, value=value)
        self._acknowledge_nag_findings(exp_id)

    def _function(
        self,
        construct_id: str,
        package: HandlerPackage,
        handler_env: dict[str, str],
        handler: str,
        timeout: Duration,
        description: str,
        *,
        reserved_concurrency: int | None = None,
    ) -> RolloutFunction:
        return RolloutFunction(
            self,
            construct_id,
            package=package,
            handler=handler,
            description=f"{self.names.exp_id}: {description}",
            environment=handler_env,
            timeout=timeout,
            reserved_concurrency=reserved_concurrency,
        )

    def _acknowledge_nag_findings(self, exp_id: str) -> None:
        """Accept the IAM5 wildcards that are the least privilege IAM can express, each with its reason."""
        bucket_name = results_bucket_name(self._nag_value(self.account), self._nag_value(self.region))
        bucket_arn = f"arn:<AWS::Partition>:s3:::{bucket_name}"
        results = f"AwsSolutions-IAM5[Resource::{bucket_arn}/{experiment_prefix(exp_id)}*]"
        payloads = f"AwsSolutions-IAM5[Resource::{bucket_arn}/{payload_ref_prefix(exp_id)}*]"
        runtime_id = self.get_logical_id(self.agent.runtime.node.default_child)
        runtime_endpoints = f"AwsSolutions-IAM5[Resource::<{runtime_id}.AgentRuntimeArn>/*]"
        table_id = self.get_logical_id(self.sessions_table.node.default_child)
        index = f"AwsSolutions-IAM5[Resource::<{table_id}.Arn>/index/*]"
        result_keys = "Keys are {exp_id}/{input_id}/{session_id}.json: the experiment's prefix is the narrowest scope."
        for principal in (self.agent.runtime, self.dispatcher.role, self.sweeper.role):
            acknowledge(principal, results, f"Writes results. {result_keys}")
        for principal in (self.finisher.role, self.trainer_policy):
            acknowledge(principal, results, f"Reads results. {result_keys}")
        for principal in (self.dispatcher.role, self.trainer_policy):
            acknowledge(principal, payloads, "Oversized payloads are parked per rollout under the experiment's prefix.")
        for worker in (self.dispatcher, self.finisher, self.sweeper):
            acknowledge(
                worker.role,
                runtime_endpoints,
                "ACR authorizes InvokeAgentRuntime/StopRuntimeSession on the runtime ARN and its endpoints (ARN/*); "
                "both are this experiment's runtime only.",
            )
            acknowledge(
                worker.role,
                index,
                "The sweeper queries the sessions table's in-flight index; the grant covers this table's indexes only.",
            )

    @staticmethod
    def _nag_value(value: str) -> str:
        """How cdk-nag prints ``value`` in a finding id: pseudo parameters as ``<AWS::Name>``."""
        pseudo = {Aws.ACCOUNT_ID: "<AWS::AccountId>", Aws.REGION: "<AWS::Region>"}
        return pseudo.get(value, value)
