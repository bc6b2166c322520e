"""One experiment: runtime, queues, result rule, sessions table, Lambdas, dashboard, trainer role."""

from __future__ import annotations

import json

from aws_cdk import Annotations, CfnOutput, Environment, RemovalPolicy, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from infra.credentials import ExperimentSecrets
from infra.doctor_grants import grant_doctor_reads
from infra.monitoring import Monitoring
from infra.nag import acknowledge, nag_logical_id, nag_value
from infra.queues import RolloutQueue
from infra.routing import ResultRouting
from infra.runtime import AdoptedAgentRuntime, AgentRuntime
from infra.settings import ExperimentSettings
from infra.tables import contract_table
from infra.trainer_access import TrainerAccess
from infra.workers import FIRST_WRITER_WINS, RESULT_KEYS, RolloutWorkers
from rollout_contract.credentials import ExperimentSecret
from rollout_contract.keys import experiment_prefix, payload_ref_prefix
from rollout_contract.protocol import DEFAULT_QUALIFIER, endpoint_qualifiers
from rollout_contract.resources import (
    AGENT_REPOSITORY_NAME,
    BUDGET_TABLE,
    ExperimentDescriptor,
    ExperimentKind,
    ExperimentResources,
    HandlerSettings,
    results_bucket_name,
)


class ExperimentStack(Stack):
    """Everything one experiment needs; results stay in the shared bucket when this stack is destroyed.

    The runtime is the stack's own, or one that exists already (``settings.adopted_runtime``): then the stack
    builds everything else around it and attaches the result-write statement to that runtime's role.

    Shared resources (results bucket, agent repository, budget table) are referenced by their
    contract names, so experiments never hold CloudFormation exports of the shared stack. Nothing
    outside the stack refers to anything in it, so ``cdk destroy`` removes it whole.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: ExperimentSettings,
        env: Environment | None = None,
        description: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id, env=env, description=description)
        exp_id = settings.exp_id
        self.names = names = ExperimentResources.for_experiment(exp_id)
        self.results_bucket = bucket = s3.Bucket.from_bucket_name(
            self, "ResultsBucket", results_bucket_name(self.account, self.region)
        )
        self.budget_table = dynamodb.Table.from_table_name(self, "BudgetTable", BUDGET_TABLE.name)
        self.agent: AgentRuntime | AdoptedAgentRuntime
        if settings.adopted_runtime is not None:
            self.agent = AdoptedAgentRuntime(self, "Agent", adopted=settings.adopted_runtime)
        else:
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
            for qualifier in endpoint_qualifiers(DEFAULT_QUALIFIER, settings.endpoints)[1:]:
                # Each endpoint has its own invoke quota. It serves this deploy's runtime version (the L2's default
                # pins version 1, which would keep the endpoint on the first image).
                self.agent.runtime.add_endpoint(
                    qualifier,
                    version=self.agent.runtime.agent_runtime_version,
                    description=f"Invoke quota {qualifier} of the rollouts",
                )
        runtime = self.agent.runtime
        self.agent.execution_role.add_to_principal_policy(self._result_writes(settings))
        # The agent reads its own experiment's model-call credential, and no other secret (D100).
        self.secrets = ExperimentSecrets(self, "Secrets", exp_id=exp_id)
        self.secrets.grant_read(self.agent.execution_role, ExperimentSecret.MODEL_KEY)
        # Construct ids DispatchQueue, CompletionQueue, FinisherQueue.
        queues = {
            label: RolloutQueue(self, f"{label.capitalize()}Queue", spec=spec) for label, spec in names.queues.items()
        }
        self.dispatch = queues["dispatch"]
        self.completions = queues["completion"]
        self.finisher_inbox = queues["finisher"]
        self.sessions_table = contract_table(
            self, "SessionsTable", spec=names.sessions_table, removal_policy=RemovalPolicy.DESTROY
        )
        self.routing = ResultRouting(
            self,
            "ResultRouting",
            exp_id=exp_id,
            rule_name=names.result_rule_name,
            bucket_name=bucket.bucket_name,
            inboxes=[self.completions, self.finisher_inbox],
        )
        self.workers = RolloutWorkers(
            self,
            "Workers",
            settings=settings,
            environment=self._handler_environment(settings),
            runtime=runtime,
            dispatch=self.dispatch,
            finisher_inbox=self.finisher_inbox,
            sessions_table=self.sessions_table,
            budget_table=self.budget_table,
            bucket=bucket,
        )
        # The functions that write results sign them with the experiment key (D100).
        for writer in (self.workers.dispatcher, self.workers.sweeper):
            self.secrets.grant_read(writer.role, ExperimentSecret.RESULT_KEY)
        self.descriptor_parameter = self._descriptor(settings)
        self.trainer = TrainerAccess(
            self,
            "Trainer",
            exp_id=exp_id,
            dispatch_queue=self.dispatch.queue,
            completion_queue=self.completions.queue,
            dead_letter_queues=[self.dispatch.dead_letter_queue, self.completions.dead_letter_queue],
            bucket=bucket,
            descriptor=self.descriptor_parameter,
            sessions_table=self.sessions_table,
            sessions_spec=names.sessions_table,
        )
        # The trainer checks results' proofs, runs the token gateway and calls its admin and trace routes.
        self.secrets.grant_read(self.trainer.policy, *ExperimentSecret)
        if settings.kind is ExperimentKind.SANDBOX:
            self.trainer.grant_sandboxes(runtime=runtime, budget_table=self.budget_table, endpoints=settings.endpoints)
        grant_doctor_reads(
            self.trainer.policy,
            queues=[self.finisher_inbox.queue, self.finisher_inbox.dead_letter_queue],
            bucket=bucket,
            result_rule=self.routing.rule,
            runtime_arn=runtime.agent_runtime_arn,
        )
        self.monitoring = Monitoring(
            self,
            "Monitoring",
            exp_id=exp_id,
            dashboard_name=names.dashboard_name(self.region),
            runtime=runtime,
            dispatch_queue=self.dispatch.queue,
            completion_queue=self.completions.queue,
            dead_letter_queues={label: queue.dead_letter_queue for label, queue in queues.items()},
            functions={name: worker.function for name, worker in self.workers.all.items()},
            max_lifetime_s=settings.max_lifetime_s,
            tps_limit=settings.tps_limit,
            session_budget=settings.session_budget,
            alarm_topic_arn=settings.alarm_topic_arn,
        )
        self._outputs()
        self._acknowledge_nag_findings(exp_id, sandbox=settings.kind is ExperimentKind.SANDBOX)

    def _result_writes(self, settings: ExperimentSettings) -> iam.PolicyStatement:
        """What the runtime's role needs: PutObject under the experiment's prefix (with If-None-Match by default).

        For an adopted runtime the statement is also printed at synth (an info annotation), with literal ARNs:
        the stack is in the runtime's account and region.
        """
        prefix = f"{experiment_prefix(settings.exp_id)}*"
        adopted = settings.adopted_runtime
        resource = (
            self.results_bucket.arn_for_objects(prefix)
            if adopted is None
            else f"arn:{adopted.partition}:s3:::{results_bucket_name(adopted.account, adopted.region)}/{prefix}"
        )
        self._agent_results = None if adopted is None else resource
        statement: dict[str, object] = {"Effect": "Allow", "Action": "s3:PutObject", "Resource": resource}
        if settings.first_writer_wins:
            statement["Condition"] = FIRST_WRITER_WINS
        if adopted is not None:
            Annotations.of(self.agent).add_info(
                f"adopting runtime {adopted.arn}: the stack attaches to its execution role {adopted.role_arn} this "
                f"statement (an AWS::IAM::Policy of the stack, removed with it): {json.dumps(statement)}, and "
                f"secretsmanager:GetSecretValue on {ExperimentSecret.MODEL_KEY.secret_name(settings.exp_id)} (the "
                "model-call key its agent sends the gateway, D100)"
            )
        return iam.PolicyStatement.from_json(statement)

    def _handler_environment(self, settings: ExperimentSettings) -> dict[str, str]:
        """The functions' ``ROLLOUTS_*`` variables (:class:`HandlerSettings`)."""
        return HandlerSettings(
            exp_id=settings.exp_id,
            results_bucket=self.results_bucket.bucket_name,
            sessions_table=self.sessions_table.table_name,
            budget_table=BUDGET_TABLE.name,
            runtime_arn=self.agent.runtime.agent_runtime_arn,
            runtime_endpoints=settings.endpoints,
            dispatch_queue_url=self.dispatch.queue.queue_url,
            tps_limit=settings.tps_limit,
            session_budget=settings.session_budget,
        ).to_env()

    def _descriptor(self, settings: ExperimentSettings) -> ssm.StringParameter:
        """The SSM parameter holding the :class:`ExperimentDescriptor` that ``RolloutClient.for_experiment`` reads."""
        descriptor = ExperimentDescriptor(
            exp_id=settings.exp_id,
            region=self.region,
            results_bucket=self.results_bucket.bucket_name,
            dispatch_queue_url=self.dispatch.queue.queue_url,
            completion_queue_url=self.completions.queue.queue_url,
            sessions_table=self.sessions_table.table_name,
            budget_table=BUDGET_TABLE.name,
            runtime_arn=self.agent.runtime.agent_runtime_arn,
            gateway_url=settings.gateway_url,
            model_id=settings.model_id,
            required_rollout_fields=list(settings.required_rollout_fields),
            unproven_results=settings.unproven_results,
            kind=settings.kind,
            tps_limit=settings.tps_limit,
            session_budget=settings.session_budget,
            runtime_endpoints=settings.endpoints,
            function_names={role: worker.function.function_name for role, worker in self.workers.all.items()},
            log_groups={role: worker.log_group.log_group_name for role, worker in self.workers.all.items()},
        )
        return ssm.StringParameter(
            self,
            "Descriptor",
            parameter_name=self.names.descriptor_parameter,
            description=f"ExperimentDescriptor of {settings.exp_id}: what RolloutClient.for_experiment reads",
            string_value=self.to_json_string(descriptor.model_dump(mode="json")),
        )

    def _outputs(self) -> None:
        outputs = {
            "DescriptorParameterName": self.descriptor_parameter.parameter_name,
            "TrainerRoleArn": self.trainer.role.role_arn,
            "RuntimeArn": self.agent.runtime.agent_runtime_arn,
            "ResultsBucketName": self.results_bucket.bucket_name,
            "DispatchQueueUrl": self.dispatch.queue.queue_url,
            "CompletionQueueUrl": self.completions.queue.queue_url,
            "SessionsTableName": self.sessions_table.table_name,
            "BudgetTableName": BUDGET_TABLE.name,
            "DashboardName": self.monitoring.dashboard.dashboard_name,
        }
        for name, value in outputs.items():
            CfnOutput(self, name, value=value)

    def _acknowledge_nag_findings(self, exp_id: str, *, sandbox: bool) -> None:
        """Accept the IAM5 wildcards that are the least privilege IAM can express, each with its reason.

        Finding ids quote the bucket ARN as cdk-nag prints it, tokens or literals (environment-bound synth).
        """
        bucket_name = results_bucket_name(nag_value(self.account), nag_value(self.region))
        bucket_arn = f"arn:{nag_value(self.partition)}:s3:::{bucket_name}"
        results = f"AwsSolutions-IAM5[Resource::{bucket_arn}/{experiment_prefix(exp_id)}*]"
        payloads = f"AwsSolutions-IAM5[Resource::{bucket_arn}/{payload_ref_prefix(exp_id)}*]"
        table_id = nag_logical_id(self.sessions_table)
        runtime_endpoints = f"AwsSolutions-IAM5[Resource::{self.agent.nag_arn}/*]"
        agent_results = (
            results if self._agent_results is None else f"AwsSolutions-IAM5[Resource::{self._agent_results}]"
        )
        acknowledge(self.agent, agent_results, f"Writes results. {RESULT_KEYS}")
        self.workers.acknowledge_wildcards(
            results=results,
            payloads=payloads,
            runtime_endpoints=runtime_endpoints,
            index=f"AwsSolutions-IAM5[Resource::<{table_id}.Arn>/index/*]",
        )
        self.trainer.acknowledge_wildcards(
            results=results,
            payloads=payloads,
            runtime_endpoints=runtime_endpoints if sandbox else None,
        )
