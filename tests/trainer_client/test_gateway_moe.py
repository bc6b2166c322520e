"""``trainer_client.gateway`` keeps each call's MoE routing compactly and the weight version that served it.

The gateway runs as a real server in front of the stand-in model as a tiny mixture of experts (``moe``: every
choice carries ``routed_experts`` as vLLM's does with ``--enable-return-routed-experts``); an agent's calls go
through a session URL, plain and streamed, and the trainer reads the traces back as it does.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest

pytest.importorskip("rllm_model_gateway")

from rllm_model_gateway import GatewayConfig  # noqa: E402
from trainer_support import served  # noqa: E402

from local_stack.model_endpoint import EndpointSettings, create_app  # noqa: E402
from local_stack.model_endpoint.moe import routed_experts  # noqa: E402
from trainer_client import RolloutClient, TokenTrace  # noqa: E402
from trainer_client._gateway_traces import SERVED_WINDOW_S, WeightVersion  # noqa: E402
from trainer_client._traces import SERVED_VERSIONS_PATH  # noqa: E402
from trainer_client.backends import _workers  # noqa: E402
from trainer_client.gateway import WEIGHT_VERSION_PATH, create_settled_app  # noqa: E402
from trainer_client.routing import RoutingUnavailableError  # noqa: E402

pytestmark = pytest.mark.processes

BODY = {"model": "stand-in", "messages": [{"role": "user", "content": "What is 12 + 30?"}]}


@pytest.fixture(scope="module")
def gateway() -> Iterator[str]:
    with served(create_app(EndpointSettings(moe=True))) as model:
        config = GatewayConfig(workers=[{"url": f"{model}/v1"}], store_worker="memory", sync_traces=True)
        with served(create_settled_app(config)) as url:
            yield url


def traces(gateway: str, session: str) -> list[TokenTrace]:
    response = httpx.get(f"{gateway}/sessions/{session}/traces/settled", timeout=30)
    return [TokenTrace.model_validate(trace) for trace in response.json()]


def test_routing_is_kept_per_call_aligned_to_its_tokens_and_never_reaches_the_agent(gateway: str) -> None:
    session = str(uuid.uuid4())
    url = f"{gateway}/sessions/{session}/v1/chat/completions"
    # WHEN the agent calls the model once plainly and once streamed
    answer = httpx.post(url, json=BODY, timeout=30).json()
    stream = httpx.post(url, json={**BODY, "stream": True}, timeout=30).text
    # THEN what it receives carries no routing
    assert "routed_experts" not in answer["choices"][0] and "routed_experts" not in stream
    # AND each trace holds the server's routing of every token it fed, row for row
    plain, streamed = traces(gateway, session)
    for trace in (plain, streamed):
        sequence = trace.prompt_token_ids + trace.completion_token_ids
        assert trace.routed_experts is not None
        assert trace.routed_experts.nested() == routed_experts(sequence)
        # one byte per expert id, against the JSON the server sent
        raw = len(json.dumps(routed_experts(sequence)))
        assert trace.routed_experts.bytes_per_token * trace.routed_experts.tokens * 4 < raw
    # AND the stored raw response does not keep the JSON copy
    assert "routed_experts" not in json.dumps(plain.model_extra.get("raw_response") or {})


def test_each_call_records_the_weight_version_the_trainer_last_gave(gateway: str) -> None:
    # GIVEN a gateway that has not been told a version
    session = str(uuid.uuid4())
    url = f"{gateway}/sessions/{session}/v1/chat/completions"
    httpx.post(url, json=BODY, timeout=30).raise_for_status()
    # WHEN the trainer pushes weights twice between the calls of one rollout (rLLM's client's route and body)
    for version in (3, 4):
        response = httpx.post(f"{gateway}{WEIGHT_VERSION_PATH}", json={"weight_version": version}, timeout=10)
        assert response.json() == {"weight_version": version}
        httpx.post(url, json=BODY, timeout=30).raise_for_status()
    # THEN the rollout's calls report every version that served them
    assert [trace.weight_version for trace in traces(gateway, session)] == [None, 3, 4]
    assert httpx.get(f"{gateway}{WEIGHT_VERSION_PATH}", timeout=10).json() == {"weight_version": 4}
    refused = httpx.post(f"{gateway}{WEIGHT_VERSION_PATH}", json={"weight_version": -1}, timeout=10)
    assert refused.status_code == 422


def test_the_gateway_counts_the_tokens_each_version_served_over_its_window(gateway: str) -> None:
    # GIVEN calls served at version 7 and then at version 8 (every stored record counted once)
    before = httpx.get(f"{gateway}{SERVED_VERSIONS_PATH}", timeout=10).json()
    session = str(uuid.uuid4())
    url = f"{gateway}/sessions/{session}/v1/chat/completions"
    for version in (7, 8, 8):
        httpx.post(f"{gateway}{WEIGHT_VERSION_PATH}", json={"weight_version": version}, timeout=10)
        httpx.post(url, json={**BODY, "stream": version == 8}, timeout=30).raise_for_status()
    # WHEN the served versions are read
    after = httpx.get(f"{gateway}{SERVED_VERSIONS_PATH}", timeout=10).json()
    # THEN each version's count grew by exactly the completion tokens its calls' traces hold
    grown = Counter({entry["weight_version"]: entry["tokens"] for entry in after["served"]})
    grown.subtract({entry["weight_version"]: entry["tokens"] for entry in before["served"]})
    expected = Counter()
    for trace in traces(gateway, session):
        expected[trace.weight_version] += len(trace.completion_token_ids)
    assert +grown == expected and set(expected) == {7, 8}
    assert (after["weight_version"], after["window_s"]) == (8, SERVED_WINDOW_S)


def test_served_counts_leave_the_window_after_five_minutes() -> None:
    now = [1000.0]
    version = WeightVersion(clock=lambda: now[0])
    version.served(3, 10)
    now[0] += 200
    version.served(4, 5)
    assert version.recent() == {3: 10, 4: 5}
    now[0] += SERVED_WINDOW_S - 150  # the first call is past the window, the second is not
    assert version.recent() == {4: 5}
    now[0] += SERVED_WINDOW_S
    assert version.recent() == {}


def test_replay_is_checked_at_start_with_one_call_through_the_gateway(gateway: str, descriptor, monkeypatch) -> None:
    monkeypatch.setattr(_workers, "_routing_returned", set())
    setting = "--use-rollout-routing-replay"
    # GIVEN a gateway in front of the stand-in served as a dense model (no routing returned)
    with served(create_app(EndpointSettings())) as model:
        config = GatewayConfig(workers=[{"url": f"{model}/v1"}], store_worker="memory", sync_traces=True)
        with (
            served(create_settled_app(config)) as dense,
            RolloutClient.from_descriptor(descriptor, gateway_url=dense) as client,
        ):
            # WHEN an adapter with replay on starts: it refuses, naming the setting and the servers' flag
            with pytest.raises(
                RoutingUnavailableError,
                match=f"{setting} is on, but a one-token call through the token gateway at {dense} came back "
                "without per-token expert routing: .*--enable-return-routed-experts",
            ):
                _workers.check_routing_returned(client, setting=setting)
    # AND in front of the MoE stand-in it passes with one model call, once per gateway and process
    with RolloutClient.from_descriptor(descriptor, gateway_url=gateway) as client:
        before = httpx.get(f"{gateway}{SERVED_VERSIONS_PATH}", timeout=10).json()["served"]
        _workers.check_routing_returned(client, setting=setting)
        after = httpx.get(f"{gateway}{SERVED_VERSIONS_PATH}", timeout=10).json()["served"]
        _workers.check_routing_returned(client, setting=setting)
        assert before != after == httpx.get(f"{gateway}{SERVED_VERSIONS_PATH}", timeout=10).json()["served"]
