"""The framework's own inference servers as the token gateway's workers: no address typed by hand.

verl and slime start their rollout servers (vLLM / SGLang) on addresses they choose at start-up, and the
weights those servers hold are the ones being trained. Our agents call the experiment's token gateway
(``-c gateway_url``, one URL per experiment, reachable from the runtime), so the gateway must send their calls
to exactly those servers. :func:`register_inference_servers` makes it so through the gateway's admin API
(rllm-model-gateway's ``/admin/workers``): the servers given are added, any other worker is removed (a
previous run's servers, the stand-in model the local stack starts with), so every traced token came from the
current weights. Each adapter calls it from the process that knows the addresses, when they are known; a
second call with the same addresses from the same process costs nothing.

The same admin API takes the weight version the servers hold (:func:`report_weight_version`, ``POST
/admin/weight_version``): each adapter reports it from its weight-sync point, and every trace then records the
version that served it, so staleness is measured, not assumed.

Why register rather than host a gateway beside each server (ART's loops do that): the agents in ACR reach one
published URL per experiment, and the trainer reads every rollout's traces from the same place (decision in
docs/decisions.md).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from trainer_client.routing import RoutingUnavailableError

if TYPE_CHECKING:
    import httpx

    from trainer_client._client import RolloutClient

__all__ = [
    "GatewayWorkersError",
    "check_routing_returned",
    "register_inference_servers",
    "report_weight_version",
    "worker_urls",
]

logger = logging.getLogger("trainer_client.backends")

#: The gateway's admin route for its workers (rllm-model-gateway 0.1.0 and later).
WORKERS_PATH = "/admin/workers"
#: The gateway's admin route for the servers' weight version (``trainer_client.gateway``; rLLM's gateway's too).
WEIGHT_VERSION_PATH = "/admin/weight_version"
#: Seconds each admin call may take.
ADMIN_TIMEOUT_S = 30.0

_lock = threading.Lock()
_registered: set[tuple[str, tuple[str, ...]]] = set()
_reported: dict[str, int] = {}
_version_refused: set[str] = set()
_routing_returned: set[str] = set()


class GatewayWorkersError(RuntimeError):
    """The gateway refused or could not take the framework's servers."""


def worker_urls(workers: Sequence[dict[str, Any]]) -> list[str]:
    """The OpenAI base URLs (``http://host:port/v1``) of the gateway's ``GET /admin/workers`` answer."""
    return [_base_url(str(worker["url"]), str(worker.get("api_path") or "")) for worker in workers]


def register_inference_servers(
    client: RolloutClient,
    urls: Sequence[str],
    *,
    framework: str,
    http: httpx.Client | None = None,
) -> None:
    """Make the gateway at ``client.gateway_url`` route model calls to exactly ``urls``.

    Args:
        client: the experiment's client (its ``gateway_url`` is the gateway the agents call).
        urls: the framework's inference servers as OpenAI base URLs (``http://host:port/v1``).
        framework: who registers (``verl``, ``slime``): names the workers and the log line.
        http: the HTTP client to call the gateway with (default: a new one, closed after).

    Raises:
        ValueError: no URL given, or the client has no gateway.
        GatewayWorkersError: the gateway did not answer or refused a change.
    """
    wanted = tuple(dict.fromkeys(_base_url(url) for url in urls))
    if not wanted:
        raise ValueError(f"{framework} gave no inference server to register with the token gateway")
    gateway = client.gateway_url
    if not gateway:
        raise ValueError(
            f"experiment {client.exp_id!r} has no token gateway, so {framework}'s inference servers "
            f"({', '.join(wanted)}) cannot be given to the agents: deploy the experiment with "
            "-c gateway_url=http://HOST:PORT (run `python -m trainer_client.gateway` where the agents can reach it), "
            "or pass gateway_url= to the client"
        )
    key = (gateway.rstrip("/"), tuple(sorted(wanted)))
    with _lock:
        if key in _registered:
            return
        _sync_workers(key[0], wanted, framework, http, client.gateway_auth)
        _registered.add(key)
    logger.info("token gateway %s now sends model calls to %s's servers: %s", gateway, framework, ", ".join(wanted))


def report_weight_version(
    client: RolloutClient, version: int, *, framework: str, http: httpx.Client | None = None
) -> bool:
    """Tell the gateway at ``client.gateway_url`` that the servers now hold weights ``version``.

    Only a version newer than the last this process reported is sent (many workers report the same step), so
    call it freely from a per-sample hook. A gateway that does not take it (a plain rllm-model-gateway 0.1.0 has
    no such route) is warned about once and training goes on: its traces then carry no version, and the adapters
    fall back to the dispatching step.

    Returns:
        Whether the gateway took it.
    """
    import httpx

    gateway = (client.gateway_url or "").rstrip("/")
    if not gateway:
        return False
    with _lock:
        if _reported.get(gateway, -1) >= version:
            return False
        _reported[gateway] = version
        try:
            with contextlib.nullcontext(http) if http is not None else httpx.Client(timeout=ADMIN_TIMEOUT_S) as http:
                http.post(
                    gateway + WEIGHT_VERSION_PATH, json={"weight_version": version}, auth=client.gateway_auth
                ).raise_for_status()
        except httpx.HTTPError as exc:
            if gateway not in _version_refused:
                _version_refused.add(gateway)
                logger.warning(
                    "the token gateway at %s did not take weight version %d from %s (%s: %s): its traces record no "
                    "weight version, so staleness falls back to the dispatching step; run `python -m "
                    "trainer_client.gateway`",
                    gateway,
                    version,
                    framework,
                    type(exc).__name__,
                    exc,
                )
            return False
    logger.info("token gateway %s: %s's servers hold weight version %d", gateway, framework, version)
    return True


def check_routing_returned(client: RolloutClient, *, setting: str) -> None:
    """Check, before any rollout, that the servers behind ``client``'s gateway return per-token MoE routing.

    One one-token call through the gateway (:meth:`RolloutClient.probe_gateway`) per gateway and process; the
    framework's ``setting`` asks for router replay. Call it after the framework's servers are registered.

    Raises:
        RoutingUnavailableError: the call's trace holds no routing, or the client has no gateway; the message
            names the server flag to turn on.
        GatewayWorkersError: the call failed (no server answered through the gateway).
    """
    import httpx

    gateway = (client.gateway_url or "").rstrip("/")
    if not gateway:
        raise RoutingUnavailableError(setting, f"the calls of experiment {client.exp_id!r} (it has no token gateway)")
    with _lock:
        if gateway in _routing_returned:
            return
        try:
            trace = client.probe_gateway()
        except httpx.HTTPError as exc:
            raise GatewayWorkersError(
                f"{setting} is on, and the one-token call through the token gateway at {gateway} that checks the "
                f"servers return MoE routing failed ({type(exc).__name__}: {exc}): check the gateway's workers "
                "and the model name (model_id)"
            ) from exc
        if trace is None or trace.routed_experts is None:
            raise RoutingUnavailableError(setting, f"a one-token call through the token gateway at {gateway}")
        _routing_returned.add(gateway)
    logger.info(
        "token gateway %s: the servers return MoE routing (%d layers x top-%d) for %s",
        gateway,
        trace.routed_experts.layers,
        trace.routed_experts.top_k,
        setting,
    )


def _sync_workers(
    gateway: str, wanted: Sequence[str], framework: str, http: httpx.Client | None, auth: httpx.Auth
) -> None:
    import httpx

    url = gateway + WORKERS_PATH
    try:
        with contextlib.nullcontext(http) if http is not None else httpx.Client(timeout=ADMIN_TIMEOUT_S) as http:
            current = http.get(url, auth=auth)
            current.raise_for_status()
            workers = current.json()
            present = set()
            for worker, base in zip(workers, worker_urls(workers), strict=True):
                if base in wanted:
                    present.add(base)
                else:
                    http.delete(f"{url}/{worker['worker_id']}", auth=auth).raise_for_status()
            for index, base in enumerate(wanted):
                if base not in present:
                    body = {"url": base, "worker_id": f"{framework}-{index}"}
                    http.post(url, json=body, auth=auth).raise_for_status()
    except httpx.HTTPStatusError as exc:
        raise GatewayWorkersError(
            f"the token gateway at {gateway} refused {exc.request.method} {exc.request.url.path}: "
            f"HTTP {exc.response.status_code} {exc.response.text[:200]}"
        ) from exc
    except httpx.HTTPError as exc:
        raise GatewayWorkersError(
            f"the token gateway at {gateway} did not answer ({type(exc).__name__}: {exc}): start it "
            "(`python -m trainer_client.gateway`) or correct the experiment's gateway_url"
        ) from exc


def _base_url(url: str, api_path: str = "") -> str:
    return url.rstrip("/") + ("/" + api_path.strip("/") if api_path.strip("/") else "")
