"""The experiment's AgentCore Runtime: the agent image, its lifecycle, environment and network."""

from __future__ import annotations

from aws_cdk import Annotations, Arn, ArnComponents, Duration, Fn, RemovalPolicy, Stack
from aws_cdk import aws_bedrockagentcore as agentcore
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.nag import acknowledge, nag_arn, nag_logical_id
from infra.settings import MISSING_IMAGE, MUTABLE_IMAGE_TAGS, AdoptedRuntime, ImageDirectory, ImageTag, VpcPlacement
from rollout_contract.protocol import DEFAULT_QUALIFIER

#: ACR appends '-' and 10 letters or digits to a runtime's name to make its id (AgentRuntimeId's pattern).
RUNTIME_ID_SUFFIX_LENGTH = 10
#: Where ACR writes the agent's output: one log group per runtime endpoint, ``{runtime id}-{endpoint}``.
RUNTIME_LOG_GROUP_PREFIX = "/aws/bedrock-agentcore/runtimes/"
RUNTIME_LOG_RETENTION = logs.RetentionDays.ONE_MONTH
#: The id CDK gives the one function per stack that sets log retentions (a fixed UUID in aws-logs).
LOG_RETENTION_FUNCTION_ID = "LogRetentionaae0aa3c5b4d4f87b02d85b201efdd8a"
#: ACR's longest session: the execution role's sessions last as long.
MAX_ROLE_SESSION = Duration.hours(8)
#: What an ACR execution role needs besides logs (the ``Runtime`` L2's lists, aws-cdk-lib 2.275).
XRAY_ACTIONS = ["xray:PutTraceSegments", "xray:PutTelemetryRecords", "xray:GetSamplingRules", "xray:GetSamplingTargets"]
ACR_METRICS_NAMESPACE = "bedrock-agentcore"
WORKLOAD_TOKEN_ACTIONS = [
    "bedrock-agentcore:GetWorkloadAccessToken",
    "bedrock-agentcore:GetWorkloadAccessTokenForJWT",
    "bedrock-agentcore:GetWorkloadAccessTokenForUserId",
]


def runtime_arn_patterns(scope: Construct, runtime_name: str) -> list[str]:
    """``aws:SourceArn`` patterns matching runtime ``runtime_name`` (and paths under it) and nothing else.

    A runtime id is the name, '-', and exactly ten letters or digits; names hold no '-', so
    ``rollout_demo-??????????`` cannot match ``rollout_demo_2``'s runtime.
    """
    runtime = Arn.format(
        ArnComponents(
            service="bedrock-agentcore",
            resource="runtime",
            resource_name=f"{runtime_name}-{'?' * RUNTIME_ID_SUFFIX_LENGTH}",
        ),
        Stack.of(scope),
    )
    return [runtime, f"{runtime}/*"]


class AgentRuntime(Construct):
    """An ACR ``Runtime`` (HTTP protocol) running the agent image, with its execution role and log retention.

    The execution role trusts ``bedrock-agentcore.amazonaws.com`` for this account and this runtime only
    (:func:`runtime_arn_patterns`). Its grants are ours, not the ``Runtime`` L2's (which would give every
    runtime's log groups and every workload identity of the account): the image pull, traces, metrics in ACR's
    namespace, and the logs and workload identity of this runtime only (:meth:`_grant_execution`); the stack
    adds the result writes. The stack sets the retention of the runtime's log group.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        runtime_name: str,
        image: ImageTag | ImageDirectory | None,
        repository: ecr.IRepository,
        idle_timeout_s: int,
        max_lifetime_s: int,
        environment: dict[str, str],
        vpc: VpcPlacement | None,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.execution_role = iam.Role(
            self,
            "ExecutionRole",
            assumed_by=iam.ServicePrincipal(
                "bedrock-agentcore.amazonaws.com",
                conditions={
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnLike": {"aws:SourceArn": runtime_arn_patterns(self, runtime_name)},
                },
            ),
            description=f"Execution role of the AgentCore Runtime {runtime_name}",
            max_session_duration=MAX_ROLE_SESSION,
        )
        self.runtime = agentcore.Runtime(
            self,
            "Runtime",
            runtime_name=runtime_name,
            # The L2 grants nothing to an immutable view: _grant_execution writes the role's policy.
            execution_role=self.execution_role.without_policy_updates(),
            description=f"Rollout agent ({runtime_name})",
            agent_runtime_artifact=self._artifact(image, repository),
            protocol_configuration=agentcore.ProtocolType.HTTP,
            lifecycle_configuration=agentcore.LifecycleConfiguration(
                idle_runtime_session_timeout=Duration.seconds(idle_timeout_s),
                max_lifetime=Duration.seconds(max_lifetime_s),
            ),
            environment_variables=environment,
            network_configuration=self._network(vpc),
        )
        if image is None:
            # An error annotation fails `cdk synth` and `cdk deploy` (naming the flag) but not `cdk destroy`.
            Annotations.of(self).add_error(MISSING_IMAGE)
        if isinstance(image, ImageTag) and image.tag in MUTABLE_IMAGE_TAGS:
            Annotations.of(self).add_warning_v2(
                "agentcore-rollouts:mutableImageTag",
                f"image tag {image.tag!r} is mutable: pushing a new image under it does not update the runtime; "
                "deploy with -c image_tag=<an immutable tag> for real runs",
            )
        self._grant_execution(runtime_name, image, repository)
        self._set_log_retention()
        self._acknowledge_role_wildcards(runtime_name)

    @property
    def nag_arn(self) -> str:
        """The runtime's ARN as cdk-nag prints it in finding ids."""
        return f"<{nag_logical_id(self.runtime)}.AgentRuntimeArn>"

    def _set_log_retention(self) -> None:
        """Give the runtime's log group (which ACR creates) a retention, whether it exists yet or not.

        CDK's ``LogRetention`` creates the group if it is missing and sets the retention either way, so it
        cannot race ACR the way a ``AWS::Logs::LogGroup`` of the same name would ("already exists").
        """
        log_group_name = Fn.join("", [RUNTIME_LOG_GROUP_PREFIX, self.runtime.agent_runtime_id, f"-{DEFAULT_QUALIFIER}"])
        logs.LogRetention(
            self,
            "LogRetention",
            log_group_name=log_group_name,
            retention=RUNTIME_LOG_RETENTION,
            removal_policy=RemovalPolicy.DESTROY,
        )
        setter = Stack.of(self).node.find_child(LOG_RETENTION_FUNCTION_ID)
        acknowledge(
            setter,
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
            "CDK's log-retention function writes its own logs with the basic execution policy.",
        )
        acknowledge(
            setter,
            "AwsSolutions-IAM5[Resource::*]",
            "CDK's log-retention function: logs:DescribeLogGroups takes no resource.",
        )
        acknowledge(
            setter,
            f"AwsSolutions-IAM5[Resource::{nag_arn(self, 'logs', 'log-group:')}{RUNTIME_LOG_GROUP_PREFIX}"
            f"<{nag_logical_id(self.runtime)}.AgentRuntimeId>-{DEFAULT_QUALIFIER}:*]",
            "CDK's log-retention function: the runtime's log group and its streams only.",
        )

    def _grant_execution(
        self, runtime_name: str, image: ImageTag | ImageDirectory | None, repository: ecr.IRepository
    ) -> None:
        """What the ``Runtime`` L2 grants its execution role, with logs and workload identity of this runtime only.

        A runtime's id is its name, '-' and ten characters, its log groups ``{id}-{endpoint}``, its workload
        identity named after it: ``{name}-*`` matches this runtime and no other (names hold no '-').
        """
        role = self.execution_role
        this_runtime = f"{runtime_name}-{'?' * RUNTIME_ID_SUFFIX_LENGTH}"
        log_groups = self._arn("logs", "log-group:")
        runtime_logs = f"{log_groups}{RUNTIME_LOG_GROUP_PREFIX}{this_runtime}-*"
        statements = [
            iam.PolicyStatement(actions=["logs:CreateLogGroup", "logs:DescribeLogStreams"], resources=[runtime_logs]),
            iam.PolicyStatement(actions=["logs:DescribeLogGroups"], resources=[f"{log_groups}*"]),
            iam.PolicyStatement(
                actions=["logs:CreateLogStream", "logs:PutLogEvents"], resources=[f"{runtime_logs}:log-stream:*"]
            ),
            iam.PolicyStatement(actions=XRAY_ACTIONS, resources=["*"]),
            iam.PolicyStatement(
                actions=["cloudwatch:PutMetricData"],
                resources=["*"],
                conditions={"StringEquals": {"cloudwatch:namespace": ACR_METRICS_NAMESPACE}},
            ),
            iam.PolicyStatement(
                actions=WORKLOAD_TOKEN_ACTIONS,
                resources=[
                    self._arn("bedrock-agentcore", "workload-identity-directory/default"),
                    self._arn(
                        "bedrock-agentcore", f"workload-identity-directory/default/workload-identity/{runtime_name}-*"
                    ),
                ],
            ),
        ]
        for statement in statements:
            role.add_to_principal_policy(statement)
        if image is None or isinstance(image, ImageTag):
            repository.grant_pull(role)

    def _arn(self, service: str, resource: str) -> str:
        stack = Stack.of(self)
        return f"arn:{stack.partition}:{service}:{stack.region}:{stack.account}:{resource}"

    def _acknowledge_role_wildcards(self, runtime_name: str) -> None:
        """Accept the wildcards of the execution role's grants, each as narrow as IAM allows."""
        log_groups = nag_arn(self, "logs", "log-group:")
        runtime_logs = f"{log_groups}{RUNTIME_LOG_GROUP_PREFIX}{runtime_name}-{'?' * RUNTIME_ID_SUFFIX_LENGTH}-*"
        reasons = {
            "*": "X-Ray, ecr:GetAuthorizationToken and cloudwatch:PutMetricData (conditioned on its namespace) "
            "take no resource.",
            f"{log_groups}*": "logs:DescribeLogGroups is account-wide.",
            runtime_logs: "this runtime's log groups: its id's ten characters and the endpoint come at deploy time.",
            f"{runtime_logs}:log-stream:*": "ACR creates a log stream per session.",
            nag_arn(
                self, "bedrock-agentcore", f"workload-identity-directory/default/workload-identity/{runtime_name}-*"
            ): ("ACR creates this runtime's workload identity at deploy time."),
        }
        for resource, reason in reasons.items():
            acknowledge(self, f"AwsSolutions-IAM5[Resource::{resource}]", f"ACR execution role: {reason}")

    def _artifact(
        self, image: ImageTag | ImageDirectory | None, repository: ecr.IRepository
    ) -> agentcore.AgentRuntimeArtifact:
        """The image (pulled by the execution role: granted here for a built one, in ``_grant_execution`` else)."""
        if isinstance(image, ImageDirectory):
            asset = ecr_assets.DockerImageAsset(
                self, "Image", directory=str(image.path), platform=ecr_assets.Platform.LINUX_ARM64
            )
            asset.repository.grant_pull(self.execution_role)
            return agentcore.AgentRuntimeArtifact.from_ecr_repository(asset.repository, asset.image_tag)
        # Without an image the synth fails (see __init__); the placeholder only lets `cdk destroy` read the app.
        tag = "no-image-given" if image is None else image.tag
        return agentcore.AgentRuntimeArtifact.from_ecr_repository(repository, tag)

    def _network(self, vpc: VpcPlacement | None) -> agentcore.RuntimeNetworkConfiguration:
        if vpc is None:
            return agentcore.RuntimeNetworkConfiguration.using_public_network()
        subnets = [
            ec2.Subnet.from_subnet_id(self, f"Subnet{i}", subnet_id) for i, subnet_id in enumerate(vpc.subnet_ids)
        ]
        return agentcore.RuntimeNetworkConfiguration.using_vpc(
            self,
            vpc=ec2.Vpc.from_vpc_attributes(self, "Vpc", vpc_id=vpc.vpc_id, availability_zones=Fn.get_azs()),
            vpc_subnets=ec2.SubnetSelection(subnets=subnets),
            security_groups=[
                ec2.SecurityGroup.from_security_group_id(self, f"SecurityGroup{i}", group_id, mutable=False)
                for i, group_id in enumerate(vpc.security_group_ids)
            ],
        )


class AdoptedAgentRuntime(Construct):
    """An ACR runtime that exists already (``-c runtime_arn``): imported, never created, changed or deleted.

    ``runtime`` offers what the stack uses of a runtime (ARN, invoke grants, metrics), and
    ``execution_role.add_to_principal_policy`` attaches a statement to the runtime's role as an ``AWS::IAM::Policy``
    of this stack, removed with it. Its log group's retention stays the owner's.
    """

    def __init__(self, scope: Construct, construct_id: str, *, adopted: AdoptedRuntime) -> None:
        super().__init__(scope, construct_id)
        self.adopted = adopted
        self.execution_role = iam.Role.from_role_arn(self, "ExecutionRole", adopted.role_arn)
        self.runtime = agentcore.Runtime.from_agent_runtime_attributes(
            self,
            "Runtime",
            agent_runtime_arn=adopted.arn,
            agent_runtime_id=adopted.runtime_id,
            agent_runtime_name=adopted.name,
            role_arn=adopted.role_arn,
        )

    @property
    def nag_arn(self) -> str:
        """The runtime's ARN as cdk-nag prints it in finding ids (a literal)."""
        return self.adopted.arn
