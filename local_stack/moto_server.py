"""The moto server process: S3, EventBridge, SQS, DynamoDB and SSM on 127.0.0.1, no AWS account.

Clients in child processes find it through ``AWS_ENDPOINT_URL`` and ``AWS_ENDPOINT_URL_<SERVICE>`` (see
:func:`aws_env`); the ACR data plane (``bedrock-agentcore``) points at the emulator instead.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from local_stack._process import LOCALHOST, ManagedProcess, free_port, http_ready

__all__ = [
    "DUMMY_CREDENTIALS",
    "LOCAL_ACCOUNT_ID",
    "LOCAL_REGION",
    "MOTO_SERVICES",
    "aws_env",
    "endpoints_for",
    "moto_process",
]

LOCAL_REGION = "us-east-1"
LOCAL_ACCOUNT_ID = "000000000000"
#: boto3 service names served by moto -> the suffix of their ``AWS_ENDPOINT_URL_<SUFFIX>`` variable.
MOTO_SERVICES: Mapping[str, str] = {
    "s3": "S3",
    "sqs": "SQS",
    "events": "EVENTBRIDGE",
    "dynamodb": "DYNAMODB",
    "ssm": "SSM",
    "cloudwatch": "CLOUDWATCH",
    "logs": "CLOUDWATCH_LOGS",
    "sts": "STS",
}
AGENTCORE_SERVICE = "bedrock-agentcore"
AGENTCORE_ENV_SUFFIX = "BEDROCK_AGENTCORE"
# Dummy credentials: moto accepts any, and they keep boto3 from looking for real ones.
DUMMY_CREDENTIALS: Mapping[str, str] = {"AWS_ACCESS_KEY_ID": "local-stack", "AWS_SECRET_ACCESS_KEY": "local-stack"}


def endpoints_for(moto_url: str, emulator_url: str | None = None) -> dict[str, str]:
    """Map boto3 service names to local endpoint URLs (the descriptor's ``endpoints``)."""
    endpoints = dict.fromkeys(MOTO_SERVICES, moto_url)
    if emulator_url:
        endpoints[AGENTCORE_SERVICE] = emulator_url
    return endpoints


def aws_env(moto_url: str, emulator_url: str | None = None) -> dict[str, str]:
    """Environment that points boto3 at the local stack: endpoints, dummy credentials, region.

    ``AWS_ENDPOINT_URL`` catches every service not listed; ``bedrock-agentcore`` goes to the emulator.
    """
    env = {"AWS_ENDPOINT_URL": moto_url, "AWS_REGION": LOCAL_REGION, "AWS_DEFAULT_REGION": LOCAL_REGION}
    env.update(DUMMY_CREDENTIALS)
    for service, url in endpoints_for(moto_url, emulator_url).items():
        suffix = AGENTCORE_ENV_SUFFIX if service == AGENTCORE_SERVICE else MOTO_SERVICES[service]
        env[f"AWS_ENDPOINT_URL_{suffix}"] = url
    return env


def moto_process(log_path: Path, base_env: Mapping[str, str], *, port: int | None = None) -> ManagedProcess:
    """Describe a ``moto_server`` child on 127.0.0.1 (a free port unless ``port`` is given).

    The server's account id is :data:`LOCAL_ACCOUNT_ID`, so queue and rule ARNs match the emulator's.
    """
    port = port or free_port()
    url = f"http://{LOCALHOST}:{port}"
    env = {**base_env, "MOTO_ACCOUNT_ID": LOCAL_ACCOUNT_ID, "AWS_DEFAULT_REGION": LOCAL_REGION}
    return ManagedProcess(
        name="moto",
        argv=[sys.executable, "-m", "moto.server", "-H", LOCALHOST, "-p", str(port)],
        log_path=log_path,
        env=env,
        url=url,
        ready=http_ready(f"{url}/moto-api/"),
    )
