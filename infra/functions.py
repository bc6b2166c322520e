"""The rollout Lambdas: one code package for all three, and one construct per function.

The package is built offline, without Docker: ``lambdas/``, ``rollout_budgets/`` and ``rollout_contract/`` from
source, plus the AWS SDK copied from this environment's installed distributions (pure Python), at the versions
pinned in ``requirements/functions.txt``. The Lambda runtime's own boto3 is never imported (``/var/task`` comes first
on ``sys.path``), so an operation the code calls (``StopRuntimeSession`` needs botocore 1.40.50) exists.
Powertools and pydantic come from the public Powertools layer, pinned to the version the suite runs.
"""

from __future__ import annotations

import importlib.metadata
import re
import shutil
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import AssetHashType, BundlingOptions, Duration, ILocalBundling, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_ssm as ssm
from constructs import Construct

PROJECT_ROOT = Path(__file__).resolve().parent.parent
#: The only source folders the functions need; everything else (tests, .venv, node_modules) stays out.
PACKAGED_FOLDERS = ("lambdas", "rollout_budgets", "rollout_contract")
PINS_FILE = PROJECT_ROOT / "requirements" / "functions.txt"
POWERTOOLS = "aws-lambda-powertools"
#: Python 3.14 on Graviton (docs/decisions.md, D13).
RUNTIME = lambda_.Runtime.PYTHON_3_14
ARCHITECTURE = lambda_.Architecture.ARM_64
LOG_RETENTION = logs.RetentionDays.ONE_MONTH
MEMORY_MB = 512
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)$")
_COMPILED_SUFFIXES = (".so", ".pyd", ".dylib")


class FunctionAssetError(RuntimeError):
    """The function package cannot be built as pinned (a distribution missing, another version, compiled)."""


def pinned_versions() -> dict[str, str]:
    """``requirements/functions.txt`` as ``{distribution: version}``."""
    pins = {}
    for line in PINS_FILE.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            match = _PIN.match(line)
            if match is None:
                raise FunctionAssetError(f"{PINS_FILE}: {line!r} is not an exact pin (name==version)")
            pins[match[1].lower()] = match[2]
    return pins


def bundled_distributions() -> dict[str, str]:
    """The distributions copied into the function package (every pin but Powertools, which is the layer)."""
    return {name: version for name, version in pinned_versions().items() if name != POWERTOOLS}


def powertools_version() -> str:
    """The Powertools release the functions use: the pinned one, which the suite runs."""
    return pinned_versions()[POWERTOOLS]


def powertools_layer_parameter(version: str) -> str:
    """Name of the public SSM parameter holding the Powertools layer ARN for our runtime and architecture.

    Powertools publishes ``/aws/service/powertools/python/{arch}/{python}/{version}`` in every region it
    ships the layer to; the v3 layer carries all extras, pydantic v2 included, and no boto3.
    """
    return f"/aws/service/powertools/python/{ARCHITECTURE.name}/{RUNTIME.name}/{version}"


def copy_distribution(name: str, version: str, target: Path, *, allow_compiled: bool = False) -> None:
    """Copy the installed distribution ``name`` (its modules and metadata) into ``target``.

    Raises:
        FunctionAssetError: it is not installed, not at ``version``, or holds compiled code while
            ``allow_compiled`` is false (the function package must run on ARM64 whatever machine built it).
    """
    try:
        distribution = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        raise FunctionAssetError(
            f"{name} is not installed, so the function package cannot ship it: run `make install`"
        ) from None
    if distribution.version != version:
        raise FunctionAssetError(
            f"{name} {distribution.version} is installed but {PINS_FILE.name} pins {version}: the functions ship "
            "what the suite runs; run `make install` (or change the pin and rerun the tests)"
        )
    for file in distribution.files or ():
        if file.parts[0] == ".." or "__pycache__" in file.parts or file.suffix == ".pyc":
            continue  # console scripts and bytecode
        if file.suffix in _COMPILED_SUFFIXES and not allow_compiled:
            raise FunctionAssetError(f"{name} holds compiled code ({file}); only pure-Python packages are shipped")
        destination = target / file
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(str(distribution.locate_file(file))), destination)


def build_function_package(target: Path) -> None:
    """Write the functions' code into ``target``: our sources and the pinned AWS SDK."""
    for folder in PACKAGED_FOLDERS:
        shutil.copytree(PROJECT_ROOT / folder, target / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name, version in bundled_distributions().items():
        copy_distribution(name, version, target)


@jsii.implements(ILocalBundling)
class _BuildLocally:
    """CDK's local bundling hook: build the package in-process (no Docker, no network)."""

    def try_bundle(self, output_dir: str, *_options: Any, **_kwargs: Any) -> bool:
        build_function_package(Path(output_dir))
        return True


class HandlerPackage(Construct):
    """The functions' code (our sources and the pinned AWS SDK) and the pinned Powertools layer.

    The layer ARN is resolved by CloudFormation at deploy time from Powertools' public SSM parameter for
    the pinned version, so synth stays offline. The asset's hash is its content's: a new pin redeploys.
    """

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.code = lambda_.Code.from_asset(
            str(PROJECT_ROOT / PACKAGED_FOLDERS[0]),
            asset_hash_type=AssetHashType.OUTPUT,
            bundling=BundlingOptions(image=RUNTIME.bundling_image, local=_BuildLocally()),
        )
        self.powertools_version = powertools_version()
        layer_arn = ssm.StringParameter.value_for_string_parameter(
            self, powertools_layer_parameter(self.powertools_version)
        )
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
        self.timeout = timeout
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
