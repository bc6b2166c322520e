"""``rollouts preflight``: what a first deploy would fail on, checked before it, with the deploying credentials.

One line per check, like ``rollouts doctor``, each failure with its fix: the region has the AgentCore Runtime
resource, CDK is bootstrapped there, the pinned Powertools layer is published there, the results bucket's name
is free or already ours, the agent image tag is in ECR and built for arm64, and the account's AgentCore quotas
cover the experiment's budgets. Every check is a function ``Target -> CheckResult`` in :data:`CHECKS`; an AWS
error fails the check it hit, never the run.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from botocore.exceptions import BotoCoreError, ClientError

from infra.functions import powertools_layer_parameter, powertools_version
from infra.regions import RUNTIME_REGIONS, RUNTIME_RESOURCE_TYPE, supports_runtime
from rollout_contract.aws import ClientFactory, Clients, Service, error_code
from rollout_contract.protocol import DEFAULT_ACTIVE_SESSION_QUOTA, DEFAULT_INVOKE_TPS
from rollout_contract.resources import AGENT_REPOSITORY_NAME, SHARED_STACK_NAME, results_bucket_name
from trainer_client.doctor import CheckResult
from trainer_client.quotas import Quotas, agentcore_quotas, endpoints_buy, shortfalls

if TYPE_CHECKING:
    from types_boto3_ecr import ECRClient

__all__ = ["CHECKS", "Target", "run_preflight"]

#: CDK's default bootstrap qualifier, and the stack and version parameter ``cdk bootstrap`` creates.
BOOTSTRAP_STACK = "CDKToolkit"
BOOTSTRAP_VERSION_PARAMETER = "/cdk-bootstrap/hnb659fds/version"
#: The bootstrap version synthesized templates require (their ``CheckBootstrapVersion`` rule).
MIN_BOOTSTRAP_VERSION = 6
ARM64 = "arm64"
_INDEX_TYPES = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json")
_MANIFEST_TYPES = ("application/vnd.oci.image.manifest.v1+json", "application/vnd.docker.distribution.manifest.v2+json")


@dataclass
class Target:
    """Where and what is about to be deployed, and the clients to look with.

    Attributes:
        region: the region to deploy to.
        account: the deploying account (``sts get-caller-identity``).
        image_tag: the agent image tag of ``-c image_tag`` (``None``: not checked).
        session_budget: the experiment's ``-c session_budget``.
        tps_limit: the experiment's ``-c tps_limit``.
        endpoints: the experiment's ``-c endpoints``.
        clients: boto3 clients by service name.
    """

    region: str
    account: str
    image_tag: str | None = None
    session_budget: int = int(DEFAULT_ACTIVE_SESSION_QUOTA * 0.9)
    tps_limit: float = float(DEFAULT_INVOKE_TPS)
    endpoints: int = 1
    clients: Clients = field(default_factory=Clients)

    @classmethod
    def connect(cls, region: str, **options: Any) -> Target:
        """Clients for ``region`` (endpoints from ``AWS_ENDPOINT_URL_*``) and the caller's account."""
        services: tuple[Service, ...] = ("sts", "ssm", "cloudformation", "s3", "ecr", "service-quotas")
        clients = ClientFactory(region=region, read_timeout_s=30).clients(*services)
        account = clients["sts"].get_caller_identity()["Account"]
        return cls(region=region, account=account, clients=clients, **options)


Check = Callable[[Target], CheckResult]


def check_region(target: Target) -> CheckResult:
    """The region's CloudFormation has the AgentCore Runtime resource."""
    if supports_runtime(target.region):
        return CheckResult("region", True, f"{target.region} has {RUNTIME_RESOURCE_TYPE}")
    return CheckResult(
        "region",
        False,
        f"{target.region} has no {RUNTIME_RESOURCE_TYPE}: the experiment stack cannot be created there",
        f"deploy to one of {', '.join(RUNTIME_REGIONS)} (AWS_REGION=... npx cdk deploy)",
    )


def check_bootstrap(target: Target) -> CheckResult:
    """CDK is bootstrapped in the account and region, at a version synthesized templates accept."""
    fix = f"npx cdk bootstrap aws://{target.account}/{target.region}"
    try:
        stack = target.clients["cloudformation"].describe_stacks(StackName=BOOTSTRAP_STACK)["Stacks"][0]
    except ClientError as exc:
        if "does not exist" not in str(exc):
            raise
        return CheckResult("cdk bootstrap", False, f"no {BOOTSTRAP_STACK} stack in {target.region}", fix)
    status = stack["StackStatus"]
    if not status.endswith("_COMPLETE") or "ROLLBACK" in status or "DELETE" in status:
        return CheckResult("cdk bootstrap", False, f"{BOOTSTRAP_STACK} is {status}", fix)
    try:
        version = int(target.clients["ssm"].get_parameter(Name=BOOTSTRAP_VERSION_PARAMETER)["Parameter"]["Value"])
    except ClientError as exc:
        if error_code(exc) != "ParameterNotFound":
            raise
        return CheckResult("cdk bootstrap", False, f"{BOOTSTRAP_VERSION_PARAMETER} does not exist", fix)
    if version < MIN_BOOTSTRAP_VERSION:
        found = f"bootstrap version {version}, templates need {MIN_BOOTSTRAP_VERSION} or later"
        return CheckResult("cdk bootstrap", False, found, fix)
    return CheckResult("cdk bootstrap", True, f"{BOOTSTRAP_STACK} is {status} (bootstrap version {version})")


def check_powertools_layer(target: Target) -> CheckResult:
    """The Powertools layer of the pinned release is published in the region (its public SSM parameter)."""
    version = powertools_version()
    parameter = powertools_layer_parameter(version)
    try:
        target.clients["ssm"].get_parameter(Name=parameter)
    except ClientError as exc:
        if error_code(exc) != "ParameterNotFound":
            raise
        return CheckResult(
            "powertools layer",
            False,
            f"{parameter} does not exist in {target.region}: the functions' layer cannot be resolved",
            "pin a Powertools release whose layer is published there (requirements/functions.txt, then make "
            "install and the suite), or deploy to another region",
        )
    return CheckResult("powertools layer", True, f"{parameter} exists (Powertools {version})")


def check_results_bucket(target: Target) -> CheckResult:
    """The shared results bucket's name is free, or the bucket is this account's already."""
    bucket = results_bucket_name(target.account, target.region)
    try:
        target.clients["s3"].head_bucket(Bucket=bucket, ExpectedBucketOwner=target.account)
    except ClientError as exc:
        code = error_code(exc)
        if code in ("404", "NoSuchBucket", "NotFound"):
            return CheckResult("results bucket", True, f"{bucket} is free (the shared stack creates it)")
        if code in ("403", "AccessDenied"):
            return CheckResult(
                "results bucket",
                False,
                f"{bucket} exists and is not this account's (bucket names are global)",
                "deploy from the account the name was made for, or delete that bucket in the account that owns it",
            )
        raise
    return CheckResult(
        "results bucket",
        True,
        f"{bucket} exists in this account (the shared stack's; after `cdk destroy` of {SHARED_STACK_NAME}, "
        "re-adopt it as the README's 'Redeploying after destroy' says)",
    )


def check_image(target: Target) -> CheckResult:
    """The agent image tag is in the shared repository and runs on arm64 (ACR's only architecture)."""
    if target.image_tag is None:
        return CheckResult("agent image", True, "no --image-tag given: not checked", warn=True)
    tag, ecr = target.image_tag, target.clients["ecr"]
    push = "push it: README 'Deploying to AWS', step 3 (docker buildx build --platform linux/arm64 ... --push)"
    try:
        found = ecr.batch_get_image(
            repositoryName=AGENT_REPOSITORY_NAME,
            imageIds=[{"imageTag": tag}],
            acceptedMediaTypes=[*_INDEX_TYPES, *_MANIFEST_TYPES],
        )
    except ClientError as exc:
        if error_code(exc) != "RepositoryNotFoundException":
            raise
        return CheckResult(
            "agent image",
            False,
            f"no ECR repository {AGENT_REPOSITORY_NAME}",
            "deploy the shared stack: npx cdk deploy",
        )
    if not found["images"]:
        return CheckResult("agent image", False, f"{AGENT_REPOSITORY_NAME}:{tag} does not exist", push)
    architectures = _architectures(ecr, json.loads(found["images"][0]["imageManifest"]))
    if architectures is None:
        return CheckResult(
            "agent image",
            True,
            f"{AGENT_REPOSITORY_NAME}:{tag} exists; its architecture could not be read from the registry",
            "make sure it was built with --platform linux/arm64",
            warn=True,
        )
    if ARM64 not in architectures:
        return CheckResult(
            "agent image",
            False,
            f"{AGENT_REPOSITORY_NAME}:{tag} is built for {', '.join(sorted(architectures))}, not {ARM64}",
            push,
        )
    return CheckResult("agent image", True, f"{AGENT_REPOSITORY_NAME}:{tag} exists for {ARM64}")


def _architectures(ecr: ECRClient, manifest: dict[str, Any]) -> set[str] | None:
    """The architectures an image manifest (or index) is for; ``None`` when the registry does not say."""
    if "manifests" in manifest:
        return {
            entry["platform"]["architecture"]
            for entry in manifest["manifests"]
            if entry.get("platform", {}).get("os") == "linux"
        }
    digest = manifest.get("config", {}).get("digest")
    if digest is None:
        return None
    try:
        url = ecr.get_download_url_for_layer(repositoryName=AGENT_REPOSITORY_NAME, layerDigest=digest)["downloadUrl"]
        with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310 - a presigned https URL from ECR
            return {json.loads(response.read())["architecture"]}
    except (ClientError, BotoCoreError, OSError, ValueError, KeyError):
        return None


def check_quotas(target: Target) -> CheckResult:
    """The account's AgentCore quotas cover the experiment's session budget and invoke rate (Service Quotas)."""
    quotas = Quotas.find(agentcore_quotas(target.clients["service-quotas"]))
    short = shortfalls(quotas, session_budget=target.session_budget, tps_limit=target.tps_limit)
    if short:
        return CheckResult(
            "quotas",
            False,
            "; ".join(short),
            "lower -c session_budget / -c tps_limit, or request an increase in the Service Quotas console",
        )
    if quotas.sessions is None or quotas.invoke_tps is None:
        return CheckResult(
            "quotas",
            True,
            f"Service Quotas lists no AgentCore session or invoke quota for {target.region}",
            f"compare session_budget {target.session_budget} and tps_limit {target.tps_limit:g} with the quotas page",
            warn=True,
        )
    listed = ", ".join(f"{quota['QuotaName']} {quota['Value']:g}" for quota in (quotas.sessions, quotas.invoke_tps))
    return CheckResult("quotas", True, f"{listed} cover the budgets")


def check_endpoints(target: Target) -> CheckResult:
    """What ``-c endpoints=K`` buys: each runtime endpoint has its own InvokeAgentRuntime quota (Service Quotas)."""
    quotas = Quotas.find(agentcore_quotas(target.clients["service-quotas"]))
    ok, detail, check = endpoints_buy(
        quotas, endpoints=target.endpoints, session_budget=target.session_budget, where=f"not listed in {target.region}"
    )
    if not ok:
        return CheckResult("endpoints", False, detail, check)
    return CheckResult("endpoints", True, detail, check, warn=bool(check))


#: Every check, in the order a deploy meets them.
CHECKS: tuple[Check, ...] = (
    check_region,
    check_bootstrap,
    check_powertools_layer,
    check_results_bucket,
    check_image,
    check_quotas,
    check_endpoints,
)


def preflight(target: Target) -> Iterator[CheckResult]:
    """Run every check in order (an AWS error fails the check it hit)."""
    for check in CHECKS:
        name = check.__name__.removeprefix("check_").replace("_", " ")
        try:
            yield check(target)
        except (ClientError, BotoCoreError) as exc:
            code = error_code(exc) if isinstance(exc, ClientError) else type(exc).__name__
            yield CheckResult(name, False, f"{code}: {exc}", "check the deploying credentials may read it, and retry")


def run_preflight(region: str, *, out: TextIO, **options: Any) -> bool:
    """Print one line per check to ``out``; return whether none failed."""
    ok = True
    for result in preflight(Target.connect(region, **options)):
        print(result.line(), file=out, flush=True)
        ok = ok and result.ok
    return ok
