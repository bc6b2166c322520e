"""The experiment's AgentCore Runtime: the agent image, its lifecycle, environment and network."""

from __future__ import annotations

from aws_cdk import Annotations, Duration, Fn
from aws_cdk import aws_bedrockagentcore as agentcore
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_ecr_assets as ecr_assets
from constructs import Construct

from infra.nag import acknowledge
from infra.settings import MUTABLE_IMAGE_TAGS, ImageDirectory, ImageTag, VpcPlacement

_LOGS = "arn:<AWS::Partition>:logs:<AWS::Region>:<AWS::AccountId>:log-group:"
_RUNTIME_LOGS = f"{_LOGS}/aws/bedrock-agentcore/runtimes/*"
#: Wildcards in the execution role the ``Runtime`` L2 generates, and why each is as narrow as IAM allows.
_GENERATED_ROLE_WILDCARDS = {
    "*": "X-Ray, ecr:GetAuthorizationToken and cloudwatch:PutMetricData (conditioned on its namespace) "
    "take no resource.",
    f"{_LOGS}*": "logs:DescribeLogGroups is account-wide.",
    _RUNTIME_LOGS: "ACR names the runtime's log groups at deploy time.",
    f"{_RUNTIME_LOGS}:log-stream:*": "ACR creates a log stream per session.",
    "arn:<AWS::Partition>:bedrock-agentcore:<AWS::Region>:<AWS::AccountId>:workload-identity-directory/default"
    "/workload-identity/*": "ACR creates the runtime's workload identity.",
}


class AgentRuntime(Construct):
    """An ACR ``Runtime`` (HTTP protocol) running the agent image, with a role CDK generates for it.

    The generated execution role trusts ``bedrock-agentcore.amazonaws.com`` (scoped to this account and
    runtime) and may write logs, traces and metrics and pull the image; the stack adds the result writes.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        runtime_name: str,
        image: ImageTag | ImageDirectory,
        repository: ecr.IRepository,
        idle_timeout_s: int,
        max_lifetime_s: int,
        environment: dict[str, str],
        vpc: VpcPlacement | None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.runtime = agentcore.Runtime(
            self,
            "Runtime",
            runtime_name=runtime_name,
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
        if isinstance(image, ImageTag) and image.tag in MUTABLE_IMAGE_TAGS:
            Annotations.of(self).add_warning_v2(
                "agentcore-rollouts:mutableImageTag",
                f"image tag {image.tag!r} is mutable: pushing a new image under it does not update the runtime; "
                "deploy with -c image_tag=<an immutable tag> for real runs",
            )
        for resource, reason in _GENERATED_ROLE_WILDCARDS.items():
            acknowledge(self.runtime, f"AwsSolutions-IAM5[Resource::{resource}]", f"CDK's ACR execution role: {reason}")

    @staticmethod
    def _artifact(image: ImageTag | ImageDirectory, repository: ecr.IRepository) -> agentcore.AgentRuntimeArtifact:
        if isinstance(image, ImageDirectory):
            return agentcore.AgentRuntimeArtifact.from_asset(image.path, platform=ecr_assets.Platform.LINUX_ARM64)
        return agentcore.AgentRuntimeArtifact.from_ecr_repository(repository, image.tag)

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
