"""``register_inference_servers``: the framework's servers become the token gateway's workers, and only they."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

pytest.importorskip("rllm_model_gateway")

from rllm_model_gateway import GatewayConfig  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from trainer_client.backends import _workers  # noqa: E402
from trainer_client.backends._workers import (  # noqa: E402
    GatewayWorkersError,
    register_inference_servers,
    report_weight_version,
    worker_urls,
)
from trainer_client.gateway import create_settled_app  # noqa: E402

GATEWAY = "http://testserver"
STAND_IN = "http://127.0.0.1:9/v1"


@pytest.fixture(autouse=True)
def forget_registrations(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_workers, "_registered", set())
    monkeypatch.setattr(_workers, "_reported", {})


@pytest.fixture
def gateway(tmp_path: Any) -> Iterator[TestClient]:
    """Our gateway app (rllm-model-gateway 0.1 underneath) that starts with the local stack's stand-in model."""
    config = GatewayConfig(
        workers=[{"url": STAND_IN, "worker_id": "model"}],
        store_worker="memory",
        health_check_interval=3600,
    )
    with TestClient(create_settled_app(config), base_url=GATEWAY) as http:
        yield http


def client(gateway_url: str | None = GATEWAY) -> Any:
    return SimpleNamespace(gateway_url=gateway_url, exp_id="demo", gateway_auth=None)


def workers(http: TestClient) -> list[str]:
    response = http.get("/admin/workers")
    response.raise_for_status()
    return worker_urls(response.json())


def test_the_frameworks_servers_replace_every_other_worker(gateway: TestClient) -> None:
    # GIVEN a gateway routing to the stack's stand-in model
    assert workers(gateway) == [STAND_IN]
    # WHEN verl registers its two rollout servers (one given twice, one with a trailing slash)
    servers = ["http://10.0.0.5:41001/v1/", "http://10.0.0.6:41002/v1", "http://10.0.0.5:41001/v1"]
    register_inference_servers(client(), servers, framework="verl", http=gateway)
    # THEN the gateway routes to exactly those two servers: the stand-in, whose weights are not trained, is gone
    assert sorted(workers(gateway)) == ["http://10.0.0.5:41001/v1", "http://10.0.0.6:41002/v1"]


def test_registering_the_same_servers_again_calls_nothing_and_new_servers_replace_old_ones(
    gateway: TestClient,
) -> None:
    # GIVEN slime's router registered once
    register_inference_servers(client(), ["http://10.0.0.7:30000/v1"], framework="slime", http=gateway)
    calls: list[str] = []
    gateway.event_hooks["request"].append(lambda request: calls.append(f"{request.method} {request.url.path}"))
    # WHEN the same process registers it again THEN the gateway is not called
    register_inference_servers(client(), ["http://10.0.0.7:30000/v1"], framework="slime", http=gateway)
    assert calls == []
    # WHEN a restarted router comes up elsewhere THEN it replaces the old one
    register_inference_servers(client(), ["http://10.0.0.8:30000/v1"], framework="slime", http=gateway)
    assert workers(gateway) == ["http://10.0.0.8:30000/v1"]
    assert calls[:1] == ["GET /admin/workers"] and "POST /admin/workers" in calls


def test_a_client_without_a_gateway_is_told_how_to_give_it_one() -> None:
    with pytest.raises(ValueError, match=r"experiment 'demo' has no token gateway.*-c gateway_url=http://HOST:PORT"):
        register_inference_servers(client(None), ["http://10.0.0.5:41001/v1"], framework="verl")


def test_no_servers_is_an_error_naming_the_framework(gateway: TestClient) -> None:
    with pytest.raises(ValueError, match="slime gave no inference server"):
        register_inference_servers(client(), [], framework="slime", http=gateway)


def test_a_gateway_that_does_not_answer_is_named_with_what_to_do() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with (
        httpx.Client(transport=httpx.MockTransport(refuse)) as http,
        pytest.raises(GatewayWorkersError, match=r"http://gw:9090 did not answer.*python -m trainer_client.gateway"),
    ):
        register_inference_servers(client("http://gw:9090"), ["http://10.0.0.5:41001/v1"], framework="verl", http=http)


def test_a_weight_version_is_told_once_per_new_version_and_traces_then_record_it(gateway: TestClient) -> None:
    # GIVEN a gateway and two workers of one trainer process reporting the step each sample comes from
    calls: list[str] = []
    gateway.event_hooks["request"].append(lambda request: calls.append(request.url.path))
    # WHEN they report steps 1, 1, 2 and an old 1 again
    told = [report_weight_version(client(), step, framework="verl", http=gateway) for step in (1, 1, 2, 1)]
    # THEN only the newer versions reached the gateway, which now holds 2
    assert told == [True, False, True, False] and calls == ["/admin/weight_version"] * 2
    assert gateway.get("/admin/weight_version").json() == {"weight_version": 2}
    # AND a client without a gateway has nothing to tell
    assert report_weight_version(client(None), 3, framework="verl") is False
