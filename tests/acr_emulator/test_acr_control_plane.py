"""The control plane's ``GetAgentRuntime`` for the runtimes the emulator hosts, through boto3."""

from __future__ import annotations

import boto3
import pytest
from acr_helpers import arn
from botocore.config import Config
from botocore.exceptions import ClientError

from local_stack.acr_emulator import EmulatorProcess, RuntimeConfig

pytestmark = pytest.mark.processes


def _control(url: str):
    return boto3.client(
        "bedrock-agentcore-control",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(retries={"total_max_attempts": 1}),
    )


def test_a_hosted_runtime_is_ready_with_its_arn_and_lifecycle(emulator: EmulatorProcess) -> None:
    # GIVEN the emulator hosting runtime "idle" (idle timeout 0.8 s)
    # WHEN a boto3 control-plane client asks for it by id
    runtime = _control(emulator.url).get_agent_runtime(agentRuntimeId="idle")
    # THEN it is READY, with the ARN the data plane takes and its lifecycle
    assert runtime["status"] == "READY"
    assert runtime["agentRuntimeArn"] == arn("idle") and runtime["agentRuntimeId"] == "idle"
    assert runtime["lifecycleConfiguration"]["maxLifetime"] > 0
    assert runtime["createdAt"].year >= 2024


def test_an_unknown_runtime_is_resource_not_found_naming_the_hosted_ones(emulator: EmulatorProcess) -> None:
    # WHEN a client asks for a runtime the emulator does not host
    with pytest.raises(ClientError) as caught:
        _control(emulator.url).get_agent_runtime(agentRuntimeId="missing-0000000000")
    # THEN it gets ACR's ResourceNotFoundException, and the message lists what is hosted
    error = caught.value.response["Error"]
    assert error["Code"] == "ResourceNotFoundException"
    assert "missing-0000000000" in error["Message"] and "idle" in error["Message"]


def test_a_runtime_arn_that_is_not_an_agentcore_runtime_arn_is_refused() -> None:
    with pytest.raises(ValueError, match="not an AgentCore runtime ARN"):
        RuntimeConfig(arn="my-agent", command=("agent",))
