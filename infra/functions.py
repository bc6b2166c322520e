"""The rollout Lambdas: one code package for all three, and one construct per function."""

from __future__ import annotations

from pathlib import Path

from aws_cdk import Duration, IgnoreMode, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_ssm as ssm
from constructs import Construct

PROJECT_ROOT = Path(__file__).resolve().parent.parent
#: The only source folders the functions need; everything else (tests, .venv, node_modules) stays out.
PACKAGED_FOLDERS = ("lambdas", "rollout_contract")
RUNTIME = lambda_.Runtime.PYTHON_3_14
ARCHITECTURE = lambda_.Architecture.ARM_64
LOG_RETENTION = logs.RetentionDays.ONE_MONTH
MEMORY_MB = 512


def powertools_layer_parameter(version: str) -> str:
    """Name of the public SSM parameter holding the Powertools layer ARN for our runtime and architecture.

    Powertools publishes ``/aws/service/powertools/python/{arch}/{python}/{version|latest}`` in every
    region it ships the layer to; the v3 layer carries all extras, pydantic v2 included.
    """
    return f"/aws/service/powertools/python/{ARCHITECTURE.name}/{RUNTIME.name}/{version}"


class HandlerPackage(Construct):
    """The functions' code (``lambdas/`` and ``rollout_contract/`` only) and the Powertools layer.

    Packaged without Docker: the asset copies source files; pydantic and Powertools come from the public
    layer, boto3 from the Lambda runtime. The layer ARN is resolved by CloudFormation at deploy time
    from Powertools' public SSM parameter, so synth stays offline.
    """

    def __init__(self, scope: Construct, construct_id: str, *, powertools_version: str) -> None:
        super().__init__(scope, construct_id)
        self.code = lambda_.Code.from_asset(
            str(PROJECT_ROOT),
            ignore_mode=IgnoreMode.GIT,
            exclude=["/*", *(f"!/{folder}/" for folder in PACKAGED_FOLDERS), "__pycache__/", "*.pyc"],
        )
        layer_arn = ssm.StringParameter.value_for_string_parameter(self, powertools_layer_parameter(powertools_version))
        self.layers = [lambda_.LayerVersion.from_layer_version_arn(self, "Powertools", layer_arn)]


class RolloutFunction(Construct):
    """One Lambda with its own role (nothing but its log group until the stack grants more) and log group."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        package: HandlerPackage,
        handler: str,
        description: str,
        environment: dict[str, str],
        timeout: Duration,
        reserved_concurrency: int | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.log_group = logs.LogGroup(self, "Logs", retention=LOG_RETENTION, removal_policy=RemovalPolicy.DESTROY)
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"{handler}: least privilege, granted by the experiment stack",
        )
        self.log_group.grant_write(self.role)
        self.function = lambda_.Function(
            self,
            "Function",
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            handler=handler,
            code=package.code,
            layers=package.layers,
            description=description,
            environment=environment,
            timeout=timeout,
            memory_size=MEMORY_MB,
            role=self.role,
            log_group=self.log_group,
            logging_format=lambda_.LoggingFormat.JSON,
            reserved_concurrent_executions=reserved_concurrency,
        )
