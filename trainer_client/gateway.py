"""The token gateway with an exact trace read: rllm-model-gateway 0.1 plus one settled-traces route.

rllm-model-gateway writes a streamed call's trace in a background task after the last chunk, so a plain
``GET /sessions/<sid>/traces`` right after the agent's result can miss the last call. This module serves
the unmodified gateway app (``rllm_model_gateway.create_app``) with two additions:

- an ASGI middleware, outermost, that counts each session's model calls in flight (a call counts from the
  moment the gateway receives it until its response, streamed or not, has been sent in full);
- ``GET /sessions/<sid>/traces/settled?timeout_s=30``: waits until the session has no call in flight and
  every trace write started while one of its calls was in flight has finished (not the other sessions'
  writes: under a batch some are always pending), then returns the same list as ``/traces``. The header
  ``X-Calls-In-Flight`` says how many of the session's calls were still running when ``timeout_s`` ran out
  (``0``: the list is complete).

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
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import yaml
from fastapi import FastAPI, Query
from fastapi.responses import JSONResponse
from rllm_model_gateway import GatewayConfig, create_app
from starlette.types import ASGIApp, Receive, Scope, Send

from trainer_client._traces import CALLS_IN_FLIGHT_HEADER, SETTLED_TRACES_PATH

__all__ = ["CALLS_IN_FLIGHT_HEADER", "SETTLED_TRACES_PATH", "CallsInFlight", "create_settled_app", "main"]

#: Longest wait a settled read may ask for.
MAX_SETTLE_S = 300.0
#: How long the gateway keeps an idle connection open: longer than its clients keep one (httpx, the trainer's trace
#: reader's, drops it after 5 s), so a client never sends on a connection the server is closing. uvicorn's default,
#: 5 s too, let a read sent as the client's pool reused the connection fail with a ReadError.
KEEP_ALIVE_S = 75
_MODEL_CALL_RE = re.compile(r"^/sessions/([^/]+)/v1(?:/.*)?$")


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


def create_settled_app(config: GatewayConfig) -> FastAPI:
    """The rllm-model-gateway app for ``config``, with call counting and the settled-traces route."""
    app = create_app(config)
    proxy, store = app.state.proxy, app.state.store
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

    app.add_api_route(SETTLED_TRACES_PATH, settled_traces, methods=["GET"])
    app.add_middleware(_CountCalls, calls=calls, pending_writes=pending_writes)
    return app


def _config(argv: Sequence[str] | None) -> GatewayConfig:
    parser = argparse.ArgumentParser(
        prog="python -m trainer_client.gateway",
        description="rllm-model-gateway with an exact settled-traces read for the trainer.",
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
    return GatewayConfig(**data)


def main(argv: Sequence[str] | None = None) -> None:
    """Serve the gateway until interrupted."""
    import uvicorn

    config = _config(argv)
    uvicorn.run(
        create_settled_app(config),
        host=config.host,
        port=config.port,
        log_level=config.log_level.lower(),
        timeout_keep_alive=KEEP_ALIVE_S,
    )


if __name__ == "__main__":
    main()
