"""The emulator's HTTP surface: the ``bedrock-agentcore`` data plane, the control plane's ``GetAgentRuntime``
for the runtimes it hosts, and ``/_admin`` views."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from local_stack.acr_emulator.errors import EmulatorError, InvalidRequestError, NotFoundError, RuntimeClientError
from local_stack.acr_emulator.metrics import RuntimeMetrics
from local_stack.acr_emulator.sessions import Session, SessionManager
from local_stack.call_log import CallLog, RecordingMiddleware
from rollout_contract.ids import SESSION_ID_MAX_LENGTH, SESSION_ID_MIN_LENGTH
from rollout_contract.protocol import (
    CUSTOM_HEADER_PREFIX,
    DEFAULT_QUALIFIER,
    REQUEST_ID_HEADER,
    RUNTIME_READY,
    SESSION_HEADER,
    TRACE_HEADERS,
    USER_ID_HEADER,
    runtime_id,
)

if TYPE_CHECKING:
    from local_stack.acr_emulator.config import EmulatorConfig, RuntimeConfig

__all__ = ["create_app"]

logger = logging.getLogger(__name__)

_PASSED_HEADERS = ("content-type", "accept", USER_ID_HEADER.lower(), *(h.lower() for h in TRACE_HEADERS))
_AGENT_CONNECT_TIMEOUT_S = 5.0


def create_app(config: EmulatorConfig) -> Starlette:
    """Build the emulator as a Starlette app; its lifespan starts and ends every agent process.

    The app's :class:`SessionManager` is ``app.state.manager``.
    """
    manager = SessionManager(config)
    created_at = time.time()

    metrics = _runtime_metrics(config)
    stop_publishing = threading.Event()

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        await manager.start()
        if metrics is not None:
            metrics.publish_every(config.metrics_interval_s, stop_publishing)
        try:
            yield
        finally:
            stop_publishing.set()
            await manager.close()

    async def invoke(request: Request) -> Response:
        started, runtime, new_session = time.monotonic(), None, False
        try:
            body = await _read_body(request, config.max_payload_bytes)
            runtime = _runtime(config, request)
            session_id = _session_id(request)
            manager.take_token(runtime, _qualifier(request), "invoke", session_id)
            manager.record_invoke(runtime)
            new_session = not manager.has_session(runtime, session_id)
            session = await manager.acquire(runtime, session_id)
            response = await _forward(manager, session, request, body)
        except EmulatorError as e:
            response = e.to_response()
        if metrics is not None and runtime is not None:
            latency_ms = (time.monotonic() - started) * 1000
            metrics.invoked(runtime.arn, status=response.status_code, latency_ms=latency_ms, new_session=new_session)
        return response

    async def stop(request: Request) -> Response:
        try:
            runtime = _runtime(config, request)
            session_id = _session_id(request)
            manager.take_token(runtime, _qualifier(request), "stop", session_id)
            await manager.stop(runtime, session_id)
        except EmulatorError as e:
            return e.to_response()
        return JSONResponse({}, headers={SESSION_HEADER: session_id})

    async def get_runtime(request: Request) -> Response:
        # Control plane (bedrock-agentcore-control GetAgentRuntime): a hosted runtime is READY while the
        # emulator serves it; one it does not host is ResourceNotFoundException, as in ACR.
        wanted = request.path_params["runtime_id"]
        runtime = next((r for r in config.runtimes if runtime_id(r.arn) == wanted), None)
        if runtime is None:
            hosted = ", ".join(runtime_id(r.arn) for r in config.runtimes)
            return NotFoundError(f"AgentRuntime {wanted} not found; the emulator hosts: {hosted}").to_response()
        return JSONResponse(_runtime_description(runtime, created_at))

    async def admin_sessions(_: Request) -> Response:
        return JSONResponse({"sessions": manager.sessions_view()})

    async def admin_stats(_: Request) -> Response:
        return JSONResponse(manager.stats_view())

    async def admin_invocations(_: Request) -> Response:
        return JSONResponse({"invocations": manager.invocations_view()})

    async def admin_calls(_: Request) -> Response:
        return JSONResponse({"calls": manager.calls_view()})

    async def admin_kill(request: Request) -> Response:
        session_id = request.path_params["session_id"]
        if not await manager.kill(session_id):
            return NotFoundError(f"no active session {session_id}").to_response()
        return JSONResponse({"killed": session_id})

    async def admin_throttle(request: Request) -> Response:
        try:
            body = await request.json()
            invoke_tps, seconds = float(body["invoke_tps"]), float(body["seconds"])
            if not (invoke_tps > 0 and seconds > 0):
                raise ValueError("invoke_tps and seconds must be positive")
        except (ValueError, KeyError, TypeError) as exc:
            return InvalidRequestError(f'give {{"invoke_tps": N, "seconds": S}}, both positive ({exc})').to_response()
        manager.throttle(invoke_tps, seconds)
        return JSONResponse({"invoke_tps": invoke_tps, "seconds": seconds})

    app = Starlette(
        routes=[
            Route("/runtimes/{arn:path}/invocations", invoke, methods=["POST"]),
            Route("/runtimes/{arn:path}/stopruntimesession", stop, methods=["POST"]),
            Route("/runtimes/{runtime_id}/", get_runtime, methods=["GET"]),
            Route("/_admin/sessions", admin_sessions, methods=["GET"]),
            Route("/_admin/stats", admin_stats, methods=["GET"]),
            Route("/_admin/invocations", admin_invocations, methods=["GET"]),
            Route("/_admin/calls", admin_calls, methods=["GET"]),
            Route("/_admin/sessions/{session_id}/kill", admin_kill, methods=["POST"]),
            Route("/_admin/throttle", admin_throttle, methods=["POST"]),
        ],
        lifespan=lifespan,
    )
    app.state.manager = manager
    if (call_log := CallLog.from_env()) is not None:
        app.add_middleware(RecordingMiddleware, log=call_log)
    return app


def _qualifier(request: Request) -> str:
    """The endpoint a data-plane request names (``DEFAULT`` when it names none, as in ACR)."""
    return request.query_params.get("qualifier", DEFAULT_QUALIFIER)


def _runtime(config: EmulatorConfig, request: Request) -> RuntimeConfig:
    arn = request.path_params["arn"]
    runtime = config.runtime(arn)
    if runtime is None:
        hosted = ", ".join(r.arn for r in config.runtimes)
        raise NotFoundError(f"AgentRuntime {arn} not found; the emulator hosts: {hosted}")
    qualifier = _qualifier(request)
    if qualifier not in runtime.qualifiers:
        raise NotFoundError(f"endpoint {qualifier!r} of {arn} not found; it has: {', '.join(runtime.qualifiers)}")
    return runtime


def _runtime_description(runtime: RuntimeConfig, created_at: float) -> dict[str, object]:
    """``GetAgentRuntime``'s answer for a hosted runtime (the fields the emulator knows)."""
    account = runtime.arn.split(":")[4]
    ident = runtime_id(runtime.arn)
    return {
        "agentRuntimeArn": runtime.arn,
        "agentRuntimeId": ident,
        "agentRuntimeName": ident.rsplit("-", 1)[0] if "-" in ident else ident,
        "agentRuntimeVersion": "1",
        "createdAt": created_at,
        "lastUpdatedAt": created_at,
        "roleArn": f"arn:aws:iam::{account}:role/acr-emulator",
        "status": RUNTIME_READY,
        "protocolConfiguration": {"serverProtocol": "HTTP"},
        "networkConfiguration": {"networkMode": "PUBLIC"},
        "lifecycleConfiguration": {
            "idleRuntimeSessionTimeout": int(runtime.idle_timeout_s),
            "maxLifetime": int(runtime.max_lifetime_s),
        },
    }


def _session_id(request: Request) -> str:
    session_id = request.headers.get(SESSION_HEADER)
    if session_id is None:
        raise InvalidRequestError(f"the {SESSION_HEADER} header is required")
    if not SESSION_ID_MIN_LENGTH <= len(session_id) <= SESSION_ID_MAX_LENGTH:
        raise InvalidRequestError(
            f"1 validation error detected: Value at 'runtimeSessionId' failed to satisfy constraint: Member must "
            f"have length between {SESSION_ID_MIN_LENGTH} and {SESSION_ID_MAX_LENGTH} (got {len(session_id)})"
        )
    return session_id


async def _read_body(request: Request, limit: int) -> bytes:
    too_large = InvalidRequestError(f"the payload is larger than the {limit}-byte limit")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


def _runtime_metrics(config: EmulatorConfig) -> RuntimeMetrics | None:
    """ACR's runtime metrics, if the config names a CloudWatch to publish them to (the local stack's)."""
    if config.cloudwatch_url is None:
        return None
    from local_stack.moto_server import LOCAL_REGION, credentials
    from rollout_contract.aws import ClientFactory

    factory = ClientFactory(
        region=LOCAL_REGION, endpoints={"cloudwatch": config.cloudwatch_url}, credentials=credentials("acr")
    )
    return RuntimeMetrics(factory.client("cloudwatch"))


def _agent_headers(request: Request, session_id: str) -> dict[str, str]:
    # The body is relayed byte for byte, so the agent must not compress it for us.
    headers = {SESSION_HEADER: session_id, REQUEST_ID_HEADER: str(uuid.uuid4()), "accept-encoding": "identity"}
    for name, value in request.headers.items():
        if name in _PASSED_HEADERS or name.startswith(CUSTOM_HEADER_PREFIX.lower()):
            headers[name] = value
    return headers


async def _forward(manager: SessionManager, session: Session, request: Request, body: bytes) -> Response:
    process, runtime = session.process, session.runtime
    assert process is not None
    agent_request = manager.client.build_request(
        "POST",
        f"{process.url}/invocations",
        content=body,
        headers=_agent_headers(request, session.session_id),
        timeout=httpx.Timeout(runtime.invoke_timeout_s, connect=_AGENT_CONNECT_TIMEOUT_S),
    )
    session.in_flight += 1
    session.touch()
    try:
        response = await manager.client.send(agent_request, stream=True)
    except httpx.HTTPError as e:
        _done(session)
        raise RuntimeClientError(f"the agent of session {session.session_id} did not answer: {type(e).__name__}") from e
    if response.status_code >= 400:
        await response.aclose()
        _done(session)
        manager.counters["agent_errors"] += 1
        raise RuntimeClientError(
            f"Received error ({response.status_code}) from runtime; check the agent process output for details."
        )
    headers = {SESSION_HEADER: session.session_id}
    if "content-type" in response.headers:
        headers["content-type"] = response.headers["content-type"]
    return StreamingResponse(_relay(response, session), headers=headers)


async def _relay(response: httpx.Response, session: Session) -> AsyncIterator[bytes]:
    try:
        async for chunk in response.aiter_raw():
            yield chunk
    except httpx.HTTPError as e:
        logger.warning("session %s: agent response broke off: %s", session.session_id, type(e).__name__)
    finally:
        await response.aclose()
        _done(session)


def _done(session: Session) -> None:
    session.in_flight -= 1
    session.touch()
