"""The token gateway asks who is calling (D100): model calls need a model-call key, admin and trace routes the admin
key; a refused call gets 401 and is not recorded; a rotated key is honoured without a restart."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

pytest.importorskip("rllm_model_gateway")

from rllm_model_gateway import GatewayConfig  # noqa: E402
from trainer_support import aws, served  # noqa: E402

from local_stack.model_endpoint import EndpointSettings, create_app  # noqa: E402
from rollout_contract.credentials import ExperimentSecret  # noqa: E402
from trainer_client._gateway_auth import GatewayAuth, GatewayKeys  # noqa: E402
from trainer_client.backends import _workers  # noqa: E402
from trainer_client.doctor import check_gateway  # noqa: E402
from trainer_client.gateway import _config, create_settled_app  # noqa: E402

pytestmark = pytest.mark.processes

EXP = "exp-gateway"
BODY = {"model": "stand-in", "messages": [{"role": "user", "content": "What is 12 + 30?"}], "max_tokens": 4}
NEW_WORKER = {"url": "http://attacker.example:8000/v1", "worker_id": "evil"}


@pytest.fixture
def keys(aws_env: None) -> dict[ExperimentSecret, str]:
    """The experiment's secrets, as its stack creates them."""
    values = {secret: f"{secret.value}-value-1" for secret in ExperimentSecret}
    for secret, value in values.items():
        aws("secretsmanager").create_secret(Name=secret.secret_name(EXP), SecretString=value)
    return values


@pytest.fixture
def gateway(keys: dict[ExperimentSecret, str]) -> Iterator[str]:
    """Our gateway, in front of the stand-in model, accepting the experiment's keys."""
    with served(create_app(EndpointSettings())) as model:
        config = GatewayConfig(workers=[{"url": f"{model}/v1"}], store_worker="memory", sync_traces=True)
        keys = GatewayKeys.of_experiments([EXP], aws("secretsmanager"), min_reread_s=0)
        app = create_settled_app(config, keys)
        with served(app) as url:
            yield url


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def admin_get(gateway: str, path: str, key: str) -> Any:
    response = httpx.get(gateway + path, headers=bearer(key), timeout=10)
    response.raise_for_status()
    return response.json()


def test_admin_routes_refuse_a_caller_without_the_admin_key_and_change_nothing(gateway, keys):
    admin, model = keys[ExperimentSecret.ADMIN_KEY], keys[ExperimentSecret.MODEL_KEY]
    # WHEN anything that reaches the gateway tries to send every agent's calls to its own server: no key, a wrong
    # key, and the model-call key every agent holds
    attempts = [
        httpx.post(f"{gateway}/admin/workers", json=NEW_WORKER, headers=headers, timeout=10).status_code
        for headers in ({}, bearer("guess"), bearer(model), {"Authorization": f"Basic {admin}"})
    ]
    # THEN each gets 401, and the gateway's workers are unchanged
    assert attempts == [401, 401, 401, 401]
    assert "evil" not in {worker["worker_id"] for worker in admin_get(gateway, "/admin/workers", admin)}
    # AND the health check stays open (it tells nothing), the workers' health does not
    assert httpx.get(f"{gateway}/health", timeout=10).status_code == 200
    assert httpx.get(f"{gateway}/health/workers", timeout=10).status_code == 401


def test_a_model_call_needs_the_model_key_and_a_refused_one_is_not_recorded(gateway, keys):
    admin, model = keys[ExperimentSecret.ADMIN_KEY], keys[ExperimentSecret.MODEL_KEY]
    # WHEN a session's model call comes without a key, then with the experiment's model-call key
    url = f"{gateway}/sessions/s-refused/v1/chat/completions"
    refused = httpx.post(url, json=BODY, timeout=30)
    accepted = httpx.post(f"{gateway}/sessions/s-accepted/v1/chat/completions", json=BODY, headers=bearer(model))
    # THEN the first gets 401 naming what it lacks and leaves no trace; the second is answered and traced
    assert refused.status_code == 401 and "model-call key" in refused.json()["error"]
    assert accepted.status_code == 200
    assert admin_get(gateway, "/sessions/s-refused/traces", admin) == []
    assert len(admin_get(gateway, "/sessions/s-accepted/traces/settled", admin)) == 1
    # AND a trace read needs the admin key: not none, not the model-call key
    for headers in ({}, bearer(model)):
        assert httpx.get(f"{gateway}/sessions/s-accepted/traces", headers=headers, timeout=10).status_code == 401


def test_a_rotated_key_is_honoured_at_once_and_the_trainers_auth_reads_it_again(gateway, keys):
    # GIVEN the trainer's admin auth, which has read the first admin key
    auth = GatewayAuth.admin(aws("secretsmanager"), EXP, min_reread_s=0)
    assert httpx.get(f"{gateway}/admin/workers", auth=auth, timeout=10).status_code == 200
    # WHEN the admin key is rotated (no redeploy, no restart)
    rotated = "gateway-admin-key-value-2"
    aws("secretsmanager").put_secret_value(SecretId=ExperimentSecret.ADMIN_KEY.secret_name(EXP), SecretString=rotated)
    # THEN the new key is accepted at its first use, and the trainer's auth, refused with its old key by a gateway
    # that no longer takes it, reads the new one and retries
    assert httpx.get(f"{gateway}/admin/workers", headers=bearer(rotated), timeout=10).status_code == 200
    auth.secret._value = "gateway-admin-key-value-0"  # a value the gateway never took: a 401 for sure
    assert httpx.get(f"{gateway}/admin/workers", auth=auth, timeout=10).status_code == 200
    assert auth.secret.value() == rotated


def test_the_adapters_register_servers_with_the_clients_admin_key(gateway, keys, monkeypatch):
    # GIVEN an adapter's client holding the experiment's admin auth
    monkeypatch.setattr(_workers, "_registered", set())
    monkeypatch.setattr(_workers, "_reported", {})
    client = type("Client", (), {"gateway_url": gateway, "exp_id": EXP})()
    client.gateway_auth = GatewayAuth.admin(aws("secretsmanager"), EXP)
    # WHEN verl registers its server and reports a weight version
    _workers.register_inference_servers(client, ["http://10.0.0.5:41001/v1"], framework="verl")
    assert _workers.report_weight_version(client, 3, framework="verl")
    # THEN the gateway took both
    admin = keys[ExperimentSecret.ADMIN_KEY]
    assert [worker["url"] for worker in admin_get(gateway, "/admin/workers", admin)] == ["http://10.0.0.5:41001"]
    assert admin_get(gateway, "/admin/weight_version", admin) == {"weight_version": 3}


def test_the_gateway_command_asks_whose_credentials_to_take():
    # WHEN the gateway is started without saying whose keys it takes THEN it refuses, naming both choices
    with pytest.raises(SystemExit):
        _config(["--worker", "http://vllm:8000/v1"])
    # AND an experiment name it cannot be is refused; --open is explicit
    with pytest.raises(SystemExit):
        _config(["--experiment", "Not_An_Experiment"])
    config, keys = _config(["--open", "--worker", "http://vllm:8000/v1"])
    assert keys is None and config.workers[0].url.startswith("http://vllm:8000")


def doctor_view(gateway_url: str) -> Any:
    """What ``rollouts doctor``'s gateway check reads of an experiment."""
    descriptor = SimpleNamespace(gateway_url=gateway_url, region="us-east-1", endpoints={}, exp_id=EXP)
    return SimpleNamespace(descriptor=descriptor, redeploy="deploy the experiment again")


def test_doctor_passes_a_gateway_that_asks_and_fails_an_open_one(gateway, keys):
    # GIVEN this experiment's gateway, and an open one (as before D100)
    with served(create_app(EndpointSettings())) as model:
        config = GatewayConfig(workers=[{"url": f"{model}/v1"}], store_worker="memory")
        with served(create_settled_app(config)) as open_gateway:
            # WHEN the doctor checks each
            asks, open_ = check_gateway(doctor_view(gateway)), check_gateway(doctor_view(open_gateway))
    # THEN the one that asks passes, the open one fails saying what anyone can do and how to start it
    assert asks.ok and "refuses callers without a key" in asks.detail
    assert not open_.ok and "without a key (HTTP 200)" in open_.detail
    assert f"--experiment {EXP}" in open_.fix
