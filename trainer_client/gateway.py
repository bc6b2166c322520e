"""The token gateway with an exact trace read and rLLM's session sampling parameters: rllm-model-gateway 0.1 plus.

rllm-model-gateway writes a streamed call's trace in a background task after the last chunk, so a plain
``GET /sessions/<sid>/traces`` right after the agent's result can miss the last call. This module serves
the unmodified gateway app (``rllm_model_gateway.create_app``) with these additions:

- an ASGI middleware, outermost, that counts each session's model calls in flight (a call counts from the
  moment the gateway receives it until its response, streamed or not, has been sent in full);
- ``sampling_params`` on ``POST /sessions`` (the body ``{"session_id", "metadata", "sampling_params"}`` rLLM's
  gateway client sends at rllm 9beb6e0f; 0.1.0's server ignores the key and its client cannot send it): every
  model call of that session goes upstream with those keys overwritten and the others as the agent sent them,
  as rLLM's gateway does there (``middleware.py`` ``_mutate``, after adding ``logprobs`` /
  ``return_token_ids``); ``DELETE /sessions/<sid>`` forgets them. A ``sampling_params`` that is not a JSON
  object is refused (422);
- ``GET /sessions/<sid>/traces/settled?timeout_s=30``: waits until the session has no call in flight and
  every trace write started while one of its calls was in flight has finished (not the other sessions'
  writes: under a batch some are always pending), then returns the same list as ``/traces``. The header
  ``X-Calls-In-Flight`` says how many of the session's calls were still running when ``timeout_s`` ran out
  (``0``: the list is complete);
- MoE routing and the weight version in every trace (:mod:`trainer_client._gateway_traces`): a response's per-token
  routing kept compactly in the record's ``metadata``, and the version that served the call, the server's stamp or
  the one last given with ``POST /admin/weight_version {"weight_version": N}`` (``GET`` reads it; the route and
  body of rLLM's gateway at 9beb6e0f, so its client's ``set_weight_version`` works here);
- ``GET /admin/served_versions``: the current weight version and the completion tokens each version served over
  the last five minutes, ``{"weight_version": 7, "window_s": 300, "served": [{"weight_version": 6, "tokens": 812},
  ...]}`` (``null``: served before any version was known), which ``rollouts top`` reads as the staleness.

Why that is exact: an agent writes its result only after its model calls returned, so by the time the
trainer holds the result each call has reached the gateway; the gateway creates a streamed call's write
task before its response ends, and stores a non-streamed call's trace (``sync_traces``) before answering.
A call the agent abandoned mid-stream may still be running; the header reports it.

Run it next to the inference servers, as the trainer's gateway (the same flags as ``rllm-model-gateway``;
a YAML ``--config`` takes every ``GatewayConfig`` field)::

    python -m trainer_client.gateway --host 10.0.1.5 --port 9090 --worker http://vllm:8000/v1 \\
        --db-path /data/gateway_traces.db

and give the trainer ``gateway_url=http://10.0.1.5:9090``. Against a plain ``rllm-model-gateway`` (no
settled route) the trainer falls back to re-reading ``/traces`` until two reads agree.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import re
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import yaml
from fastapi import FastAPI, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from rllm_model_gateway import GatewayConfig, create_app
from rllm_model_gateway.middleware import SessionRoutingMiddleware
from starlette.middleware import Middleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rollout_contract.aws import ClientFactory
from rollout_contract.ids import InvalidIdError, validate_experiment
from trainer_client._gateway_auth import GatewayKeys, RequireCredentials
from trainer_client._gateway_traces import SERVED_WINDOW_S, WeightVersion, install, record_version
from trainer_client._traces import CALLS_IN_FLIGHT_HEADER, SERVED_VERSIONS_PATH, SETTLED_TRACES_PATH

__all__ = [
    "CALLS_IN_FLIGHT_HEADER",
    "SETTLED_TRACES_PATH",
    "CallsInFlight",
    "SessionSamplingParams",
    "create_settled_app",
    "main",
]

#: Longest wait a settled read may ask for.
MAX_SETTLE_S = 300.0
#: How long the gateway keeps an idle connection open: longer than its clients keep one (httpx, the trainer's trace
#: reader's, drops it after 5 s), so a client never sends on a connection the server is closing. uvicorn's default,
#: 5 s too, let a read sent as the client's pool reused the connection fail with a ReadError.
KEEP_ALIVE_S = 75
_MODEL_CALL_RE = re.compile(r"^/sessions/([^/]+)/v1(?:/.*)?$")
_SESSION_RE = re.compile(r"^/sessions/([^/]+)$")


class CallsInFlight:
    """Each session's model calls in flight through the gateway, the trace writes they started, and a wait for none."""

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()
        self._changed = asyncio.Condition()
        #: Trace writes not finished yet, by the session whose call was in flight when each started (a write of
        #: another session's concurrent call may be listed too: waiting for it costs time, never exactness).
        self._writes: dict[str, set[asyncio.Future[Any]]] = {}

    def count(self, session_id: str) -> int:
        """Calls of ``session_id`` in flight now."""
        return self._counts[session_id]

    async def enter(self, session_id: str) -> None:
        """A call of ``session_id`` arrived."""
        async with self._changed:
            self._counts[session_id] += 1

    async def leave(self, session_id: str, writes: Iterable[asyncio.Future[Any]] = ()) -> None:
        """A call of ``session_id`` has been answered in full; ``writes`` started while it was in flight."""
        for write in writes:
            if not write.done():
                self._writes.setdefault(session_id, set()).add(write)
                write.add_done_callback(functools.partial(self._forget_write, session_id))
        async with self._changed:
            self._counts[session_id] -= 1
            if self._counts[session_id] <= 0:
                del self._counts[session_id]
            self._changed.notify_all()

    def writes(self, session_id: str) -> list[asyncio.Future[Any]]:
        """The trace writes started during ``session_id``'s calls that have not finished."""
        return list(self._writes.get(session_id, ()))

    def _forget_write(self, session_id: str, write: asyncio.Future[Any]) -> None:
        writes = self._writes.get(session_id)
        if writes is not None:
            writes.discard(write)
            if not writes:
                del self._writes[session_id]

    async def wait_idle(self, session_id: str, timeout_s: float) -> int:
        """Wait up to ``timeout_s`` until ``session_id`` has no call in flight; return how many still are."""
        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(lambda: not self._counts[session_id]), timeout_s)
            except TimeoutError:
                pass
            return self._counts[session_id]


class _CountCalls:
    """ASGI middleware: every ``/sessions/<sid>/v1/...`` request counts as in flight until it returns, and the
    trace writes the gateway starts meanwhile are the session's."""

    def __init__(self, app: ASGIApp, *, calls: CallsInFlight, pending_writes: set[asyncio.Future[Any]]) -> None:
        self._app = app
        self._calls = calls
        self._pending_writes = pending_writes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = _MODEL_CALL_RE.match(scope.get("path", "")) if scope["type"] == "http" else None
        if match is None:
            await self._app(scope, receive, send)
            return
        session_id = match.group(1)
        before = set(self._pending_writes)
        await self._calls.enter(session_id)
        try:
            await self._app(scope, receive, send)
        finally:
            await self._calls.leave(session_id, self._pending_writes - before)


class SessionSamplingParams:
    """Each session's sampling parameters, from ``POST /sessions``, kept until ``DELETE /sessions/<sid>``."""

    def __init__(self) -> None:
        self._params: dict[str, dict[str, Any]] = {}

    def get(self, session_id: str) -> dict[str, Any] | None:
        """The parameters ``session_id`` was created with, if any."""
        return self._params.get(session_id)

    def set(self, session_id: str, params: dict[str, Any]) -> None:
        """Apply ``params`` to every later model call of ``session_id``."""
        self._params[session_id] = params

    def forget(self, session_id: str) -> None:
        """The session was deleted."""
        self._params.pop(session_id, None)


class _ApplySessionParams:
    """ASGI middleware just inside rllm-model-gateway's ``SessionRoutingMiddleware`` (which has moved the session
    id of a model call into ``scope["state"]`` and added ``logprobs`` / ``return_token_ids`` to its body): keeps
    ``POST /sessions``' ``sampling_params``, overwrites those keys in the session's model calls, forgets them on
    ``DELETE /sessions/<sid>``."""

    def __init__(self, app: ASGIApp, *, params: SessionSamplingParams) -> None:
        self._app = app
        self._params = params

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        method, path = scope.get("method", ""), scope.get("path", "")
        if method == "DELETE" and (deleted := _SESSION_RE.match(path)):
            self._params.forget(deleted.group(1))
        elif method == "POST" and path == "/sessions":
            await self._create_session(scope, receive, send)
            return
        elif method == "POST" and (session_id := scope.get("state", {}).get("session_id")):
            params = self._params.get(session_id)
            if params:
                body = await _read_body(receive)
                try:
                    call = json.loads(body)
                except ValueError:  # not JSON: upstream answers it as is
                    call = None
                if isinstance(call, dict):
                    body = json.dumps({**call, **params}).encode()
                receive = _replay(body, receive)
        await self._app(scope, receive, send)

    async def _create_session(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await _read_body(receive)
        try:
            request = json.loads(body)
        except ValueError:  # the gateway's own route answers it
            request = None
        params = request.get("sampling_params") if isinstance(request, dict) else None
        if params is not None and not isinstance(params, dict):
            refusal = JSONResponse(
                {"error": f"sampling_params must be a JSON object (e.g. {{'temperature': 1.0}}), not {params!r}"},
                status_code=422,
            )
            await refusal(scope, receive, send)
            return
        if params and isinstance(request, dict):
            # The session id the gateway's route will use: the caller's, or one made here as the route would.
            session_id = request.get("session_id") or str(uuid.uuid4())
            self._params.set(session_id, params)
            body = json.dumps({**request, "session_id": session_id}).encode()
        await self._app(scope, _replay(body, receive), send)


async def _read_body(receive: Receive) -> bytes:
    parts: list[bytes] = []
    more = True
    while more:
        message = await receive()
        parts.append(message.get("body", b""))
        more = message.get("more_body", False)
    return b"".join(parts)


def _replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` that gives ``body`` first, then what the client sends (a disconnect, which streaming watches)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


#: The admin route of the weight version (rLLM's gateway's).
WEIGHT_VERSION_PATH = "/admin/weight_version"


def _none_first(item: tuple[int | None, int]) -> tuple[bool, int]:
    return item[0] is not None, item[0] or 0


def create_settled_app(config: GatewayConfig, keys: GatewayKeys | None = None) -> FastAPI:
    """The rllm-model-gateway app for ``config``, with call counting, session sampling parameters, the
    settled-traces route, and routing and weight versions in the traces.

    With ``keys``, every route but ``GET /health`` answers 401 to a caller without a key they accept, before anything
    is recorded (:mod:`trainer_client._gateway_auth`); without, the app is open (tests, a gateway behind its own
    authentication)."""
    install()
    app = create_app(config)
    proxy, store = app.state.proxy, app.state.store
    routing = [i for i, (cls, _, _) in enumerate(app.user_middleware) if cls is SessionRoutingMiddleware]
    if not routing:
        raise RuntimeError(
            "this rllm-model-gateway no longer adds its SessionRoutingMiddleware in create_app (checked with "
            "0.1.0); install rllm-model-gateway 0.1.x"
        )
    sampling_params = SessionSamplingParams()
    app.user_middleware.insert(routing[0] + 1, Middleware(_ApplySessionParams, params=sampling_params))
    pending_writes = getattr(proxy, "_pending_traces", None)
    if not isinstance(pending_writes, set):
        raise RuntimeError(
            "this rllm-model-gateway no longer keeps its trace writes in ReverseProxy._pending_traces "
            "(checked with 0.1.0); install rllm-model-gateway 0.1.x"
        )
    calls = CallsInFlight()

    async def settled_traces(session_id: str, timeout_s: float = Query(30.0, ge=0.0, le=MAX_SETTLE_S)) -> JSONResponse:
        in_flight = await calls.wait_idle(session_id, timeout_s)
        writes = calls.writes(session_id)
        if writes:
            await asyncio.gather(*writes, return_exceptions=True)
        traces = await store.get_session_traces(session_id)
        return JSONResponse(traces, headers={CALLS_IN_FLIGHT_HEADER: str(in_flight)})

    version = WeightVersion()
    record_version(proxy, version)

    async def set_weight_version(body: WeightVersionBody) -> dict[str, int | None]:
        version.current = body.weight_version
        return {"weight_version": version.current}

    async def get_weight_version() -> dict[str, int | None]:
        return {"weight_version": version.current}

    async def get_served_versions() -> dict[str, Any]:
        served = version.recent()
        return {
            "weight_version": version.current,
            "window_s": SERVED_WINDOW_S,
            "served": [{"weight_version": v, "tokens": n} for v, n in sorted(served.items(), key=_none_first)],
        }

    routes: list[tuple[str, Callable[..., Any], str]] = [
        (SETTLED_TRACES_PATH, settled_traces, "GET"),
        (WEIGHT_VERSION_PATH, set_weight_version, "POST"),
        (WEIGHT_VERSION_PATH, get_weight_version, "GET"),
        (SERVED_VERSIONS_PATH, get_served_versions, "GET"),
    ]
    for path, endpoint, method in routes:
        app.add_api_route(path, endpoint, methods=[method])
    # Ours first: the gateway at rLLM HEAD routes /sessions/{session_id:path} (which would take the settled path)
    # and has a weight version route of its own (whose version would not reach our records).
    ours = app.router.routes[-len(routes) :]
    app.router.routes[:] = [*ours, *app.router.routes[: -len(routes)]]
    app.add_middleware(_CountCalls, calls=calls, pending_writes=pending_writes)
    if keys is not None:
        app.add_middleware(RequireCredentials, keys=keys)  # outermost: a refused call is neither counted nor recorded
    return app


class WeightVersionBody(BaseModel):
    """``POST /admin/weight_version``: the policy version the servers hold from now on."""

    weight_version: int = Field(ge=0)


def _config(argv: Sequence[str] | None) -> tuple[GatewayConfig, GatewayKeys | None]:
    parser = argparse.ArgumentParser(
        prog="python -m trainer_client.gateway",
        description="rllm-model-gateway with an exact settled-traces read for the trainer.",
    )
    who = parser.add_mutually_exclusive_group(required=True)
    who.add_argument(
        "--experiment",
        action="append",
        metavar="NAME",
        help="accept the credentials of experiment NAME (repeat for several): its model-call key on model calls, "
        "its admin key everywhere, read from Secrets Manager with this host's AWS credentials (the trainer role's)",
    )
    who.add_argument(
        "--open",
        action="store_true",
        help="accept every caller: anything that reaches the gateway can register workers and read every trace",
    )
    parser.add_argument("--config", help="YAML file with GatewayConfig fields (flags override it)")
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    parser.add_argument("--worker", action="append", help="inference server URL, e.g. http://vllm:8000/v1 (repeat)")
    parser.add_argument("--db-path", help="SQLite trace file")
    parser.add_argument("--store", choices=["sqlite", "memory"])
    parser.add_argument("--log-level")
    args = parser.parse_args(argv)
    data: dict[str, Any] = {}
    if args.config:
        with open(args.config) as file:
            data.update(yaml.safe_load(file) or {})
    overrides = {"host": args.host, "port": args.port, "db_path": args.db_path, "store_worker": args.store}
    data.update({key: value for key, value in overrides.items() if value is not None})
    if args.log_level:
        data["log_level"] = args.log_level
    if args.worker:
        data["workers"] = [{"url": url, "worker_id": str(i)} for i, url in enumerate(args.worker)]
    if args.open:
        return GatewayConfig(**data), None
    for name in args.experiment:
        try:
            validate_experiment(name)
        except InvalidIdError as exc:
            parser.error(f"--experiment {name!r}: {exc}")
    return GatewayConfig(**data), GatewayKeys.of_experiments(args.experiment, ClientFactory().client("secretsmanager"))


def main(argv: Sequence[str] | None = None) -> None:
    """Serve the gateway until interrupted."""
    import uvicorn

    config, keys = _config(argv)
    uvicorn.run(
        create_settled_app(config, keys),
        host=config.host,
        port=config.port,
        log_level=config.log_level.lower(),
        timeout_keep_alive=KEEP_ALIVE_S,
    )


if __name__ == "__main__":
    main()
