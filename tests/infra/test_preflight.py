"""``rollouts preflight`` against a moto server: each failing case moto can stage fails its own line with a fix."""

from __future__ import annotations

import json
from collections.abc import Iterator

import boto3
import httpx
import pytest
from botocore.stub import Stubber
from moto.server import ThreadedMotoServer

from infra.functions import powertools_layer_parameter, powertools_version
from infra.preflight import (
    BOOTSTRAP_STACK,
    BOOTSTRAP_VERSION_PARAMETER,
    Target,
    check_endpoints,
    check_quotas,
    check_results_bucket,
    preflight,
)
from infra.regions import RUNTIME_REGIONS
from rollout_contract.resources import AGENT_REPOSITORY_NAME, results_bucket_name
from trainer_client._cli import main as rollouts

pytestmark = pytest.mark.cdk

REGION = "us-east-1"
ACCOUNT = "123456789012"
INDEX = "application/vnd.oci.image.index.v1+json"


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(autouse=True)
def aws(monkeypatch: pytest.MonkeyPatch, moto_url: str) -> None:
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    for name, value in {
        "AWS_ENDPOINT_URL": moto_url,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "deployer",
        "AWS_SECRET_ACCESS_KEY": "deployer",
    }.items():
        monkeypatch.setenv(name, value)
    httpx.post(f"{moto_url}/moto-api/reset", timeout=30, trust_env=False).raise_for_status()


def lines(region: str = REGION, **options: object) -> dict[str, str]:
    """Each check's report line, by check name."""
    return {result.name: result.line() for result in preflight(Target.connect(region, **options))}


def bootstrap(version: int = 30) -> None:
    """What `npx cdk bootstrap` leaves: the CDKToolkit stack and its version parameter."""
    template = {"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}}
    boto3.client("cloudformation").create_stack(StackName=BOOTSTRAP_STACK, TemplateBody=json.dumps(template))
    boto3.client("ssm").put_parameter(Name=BOOTSTRAP_VERSION_PARAMETER, Value=str(version), Type="String")


def push(tag: str, architecture: str) -> None:
    """An image index (what `docker buildx --push` writes) for one platform."""
    ecr = boto3.client("ecr")
    try:
        ecr.create_repository(repositoryName=AGENT_REPOSITORY_NAME)
    except ecr.exceptions.RepositoryAlreadyExistsException:
        pass
    platform = {"architecture": architecture, "os": "linux"}
    entry = {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "sha256:" + "a" * 64, "size": 1}
    manifest = {"schemaVersion": 2, "mediaType": INDEX, "manifests": [{**entry, "platform": platform}]}
    ecr.put_image(repositoryName=AGENT_REPOSITORY_NAME, imageManifest=json.dumps(manifest), imageTag=tag)


def test_a_region_without_the_runtime_resource_fails_naming_the_supported_ones() -> None:
    # WHEN preflight runs for a region CloudFormation has no AgentCore Runtime in
    line = lines("ap-east-1")["region"]
    # THEN the region line fails and names every region that has it
    assert line.startswith("FAIL  region ")
    assert "ap-east-1 has no AWS::BedrockAgentCore::Runtime" in line
    assert all(region in line for region in RUNTIME_REGIONS)


def test_an_account_not_bootstrapped_fails_with_the_bootstrap_command() -> None:
    line = lines()["cdk bootstrap"]
    assert line.startswith("FAIL") and f"no {BOOTSTRAP_STACK} stack" in line
    assert line.endswith(f"-> npx cdk bootstrap aws://{ACCOUNT}/{REGION}")


def test_an_old_bootstrap_fails_and_a_current_one_passes() -> None:
    bootstrap(version=5)
    assert "bootstrap version 5, templates need 6" in lines()["cdk bootstrap"]
    boto3.client("ssm").put_parameter(Name=BOOTSTRAP_VERSION_PARAMETER, Value="30", Overwrite=True, Type="String")
    assert lines()["cdk bootstrap"].startswith("PASS")


def test_a_region_without_the_pinned_powertools_layer_fails_naming_the_parameter() -> None:
    line = lines()["powertools layer"]
    assert line.startswith("FAIL")
    assert f"{powertools_layer_parameter(powertools_version())} does not exist in {REGION}" in line


def test_a_missing_or_amd64_image_fails_and_an_arm64_one_passes() -> None:
    assert f"no ECR repository {AGENT_REPOSITORY_NAME}" in lines(image_tag="v1")["agent image"]
    push("v1", "amd64")
    assert f"{AGENT_REPOSITORY_NAME}:v2 does not exist" in lines(image_tag="v2")["agent image"]
    assert "is built for amd64, not arm64" in lines(image_tag="v1")["agent image"]
    push("v2", "arm64")
    assert (
        lines(image_tag="v2")["agent image"]
        == f"PASS  agent image                {AGENT_REPOSITORY_NAME}:v2 exists for arm64"
    )


def test_the_results_bucket_passes_when_free_or_ours() -> None:
    bucket = results_bucket_name(ACCOUNT, REGION)
    assert f"{bucket} is free" in lines()["results bucket"]
    boto3.client("s3").create_bucket(Bucket=bucket)
    assert f"{bucket} exists in this account" in lines()["results bucket"]


def test_a_bucket_name_taken_by_another_account_fails() -> None:
    # moto ignores ExpectedBucketOwner: S3's 403 for another owner's bucket is stubbed
    target = Target(region=REGION, account=ACCOUNT, clients={"s3": boto3.client("s3")})
    with Stubber(target.clients["s3"]) as s3:
        s3.add_client_error("head_bucket", service_error_code="403", http_status_code=403)
        result = check_results_bucket(target)
    assert not result.ok and "is not this account's" in result.detail


def test_quotas_below_the_budgets_fail_and_unlisted_quotas_warn() -> None:
    # moto's Service Quotas knows no AgentCore quotas: they are unlisted there
    assert lines()["quotas"].startswith("WARN  quotas ")
    # AND with AWS's answer stubbed, a quota below a budget fails naming both
    quotas_client = boto3.client("service-quotas")
    target = Target(region=REGION, account=ACCOUNT, session_budget=900, clients={"service-quotas": quotas_client})
    with Stubber(target.clients["service-quotas"]) as quotas:
        sessions = {"QuotaName": "Active session workloads per account", "QuotaCode": "L-1", "Value": 500.0}
        invokes = {"QuotaName": "InvokeAgentRuntime requests per second", "QuotaCode": "L-2", "Value": 25.0}
        quotas.add_response("list_aws_default_service_quotas", {"Quotas": [sessions, invokes]})
        quotas.add_response("list_service_quotas", {"Quotas": []})
        result = check_quotas(target)
    assert not result.ok
    assert result.detail == "Active session workloads per account is 500, the budget 900"


def test_endpoints_say_what_k_buys_from_the_per_endpoint_invoke_quota() -> None:
    # GIVEN an account whose invoke quota is 40/s per endpoint and 2,000 sessions (AWS's answer stubbed), 4 endpoints
    target = Target(
        region=REGION,
        account=ACCOUNT,
        endpoints=4,
        session_budget=1800,
        clients={"service-quotas": boto3.client("service-quotas")},
    )
    with Stubber(target.clients["service-quotas"]) as quotas:
        invokes = {"QuotaName": "InvokeAgentRuntime requests per second", "QuotaCode": "L-2", "Value": 40.0}
        sessions = {"QuotaName": "Active session workloads per account", "QuotaCode": "L-1", "Value": 2000.0}
        quotas.add_response("list_aws_default_service_quotas", {"Quotas": [invokes, sessions]})
        quotas.add_response("list_service_quotas", {"Quotas": []})
        result = check_endpoints(target)
    # THEN it passes and says the rollouts/s the 4 buy (an invoke and a stop each), and the most 10 buy
    assert result.ok and not result.warn
    assert "40/s per endpoint" in result.detail and "endpoints=4 dispatches up to 80 rollouts/s" in result.detail
    assert "10 endpoints 200/s" in result.detail
    # AND from how long a rollout on: the session budget binds first (1,800 sessions / 80 rollouts/s = 22.5 s)
    assert "Active session workloads per account 2000) binds first for rollouts longer than 22 s" in result.detail
    # AND more endpoints than a runtime may have fail, naming the range
    assert not check_endpoints(Target(region=REGION, account=ACCOUNT, endpoints=11, clients=target.clients)).ok


def test_preflight_endpoints_flag_says_what_k_buys_at_the_default_when_the_quota_is_unknown(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # GIVEN moto's Service Quotas, which lists no AgentCore quota: WHEN preflight is asked about 10 endpoints
    rollouts(["preflight", "--region", REGION, "--endpoints", "10", "--session-budget", "900"])
    line = next(line for line in capsys.readouterr().out.splitlines() if line[6:32].strip() == "endpoints")
    # THEN it warns that the quota is unknown and still says what 10 endpoints buy at ACR's published 25/s
    assert line.startswith("WARN") and "quota unknown (not listed in us-east-1)" in line
    assert "endpoints=10 dispatches up to 125 rollouts/s" in line and "longer than 7 s" in line
    assert line.endswith("-> check the invoke and active session quota on the Service Quotas page")


def test_the_cli_prints_one_line_per_check_and_exits_1_on_a_failure(capsys: pytest.CaptureFixture[str]) -> None:
    status = rollouts(["preflight", "--region", REGION, "--image-tag", "v1"])
    out = capsys.readouterr().out.splitlines()
    assert status == 1
    assert [line[6:32].strip() for line in out] == [
        "region",
        "cdk bootstrap",
        "powertools layer",
        "results bucket",
        "agent image",
        "quotas",
        "endpoints",
    ]
