"""End to end: the transformer policy server and the token gateway as real processes, an agent's two calls.

The lookup agent's episode runs through a gateway session URL; the trainer's trace reader gets both calls,
they assemble into one row whose checks pass, and a weight push shows up as the next episode's version.
"""

import asyncio
import io
import os
import uuid

import httpx
import pytest

torch = pytest.importorskip("torch")

from openai import AsyncOpenAI  # noqa: E402

from examples.grpo_local.agent import run_episode  # noqa: E402
from examples.grpo_local.checks import BatchChecks, TrainingRow  # noqa: E402
from local_stack.gateway import gateway_process, session_base_url  # noqa: E402
from local_stack.model_endpoint import EndpointSettings  # noqa: E402
from local_stack.model_endpoint.process import model_endpoint_process  # noqa: E402
from local_stack.tiny_policy import ChatTokenizer, PolicyConfig, build_model, sequence_logprobs  # noqa: E402
from trainer_client import TraceSettings  # noqa: E402
from trainer_client._traces import TraceReader  # noqa: E402

pytestmark = pytest.mark.e2e


READY_TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def model_url(tmp_path_factory):
    """The transformer policy server process (``.../v1``)."""
    settings = EndpointSettings(policy="transformer")
    process = model_endpoint_process(run_dir=tmp_path_factory.mktemp("model"), base_env=os.environ, settings=settings)
    process.start()
    try:
        process.wait_ready(READY_TIMEOUT_S)
        yield f"{process.url}/v1"
    finally:
        process.stop()


@pytest.fixture(scope="module")
def gateway_url(model_url, tmp_path_factory):
    """The token gateway process in front of it."""
    process = gateway_process(model_base_url=model_url, run_dir=tmp_path_factory.mktemp("gw"), base_env=os.environ)
    process.start()
    try:
        process.wait_ready(READY_TIMEOUT_S)
        yield process.url
    finally:
        process.stop()


def _episode(gateway_url, payload):
    session_id = str(uuid.uuid4())

    async def play():
        async with AsyncOpenAI(base_url=session_base_url(gateway_url, session_id), api_key="EMPTY") as client:
            return await run_episode(client, "tiny-policy", payload, {"temperature": 1.0, "max_tokens": 6})

    outcome = asyncio.run(play())
    reader = TraceReader(gateway_url, TraceSettings())
    try:
        return outcome, reader.read(session_id)
    finally:
        reader.close()


def test_an_episode_through_the_gateway_is_token_exact_and_versioned(model_url, gateway_url):
    # GIVEN the server's weights, pushed as version 5, biased so the model calls the tool first
    model = build_model(PolicyConfig())
    with torch.no_grad():
        model.head.bias[ChatTokenizer().tool_call_id] = 8.0
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    pushed = httpx.post(
        f"{model_url}/weights?version=5",
        content=buffer.getvalue(),
        headers={"content-type": "application/octet-stream"},
        timeout=60,
    )
    assert pushed.json() == {"weight_version": 5}
    # WHEN the lookup agent plays an episode through a gateway session URL
    outcome, traces = _episode(gateway_url, {"prompt": "what is the secret? use lookup", "secret": "4"})
    # THEN it called the tool, and the gateway recorded every call with the server's ids, logprobs and version
    assert outcome["called_tool"]
    assert len(traces) == outcome["model_calls"] >= 2
    checks = BatchChecks()
    rows = [TrainingRow.of(row, 1.0) for row in checks.check_rollout(traces, step=5)]
    checks.compare_logprobs(rows, lambda ids: sequence_logprobs(model, ids))
    assert checks.passed, checks
    assert checks.spliced_tokens > 0
