"""``AgentCoreRuntimeApp``: an ordinary ``@app.entrypoint`` app whose invocations can also be started and looked up.

A request without the ``_agentcore_runtime`` envelope is the parent's (the handler's answer is the HTTP answer),
unless the app was made with ``background=True``: then it starts in the background under a new id. A request
with the envelope starts an invocation (waiting for it, or in the background) or gets its state; an id already
known is never started twice. Each invocation is recorded in :class:`InvocationStore` when accepted and when
finished, so a process that restarts on the same ``state_dir`` answers ``interrupted`` for work it lost. While
an invocation runs, ``/ping`` is ``HealthyBusy``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from agent_app._sdk import BedrockAgentCoreApp
from agent_app.runtime._protocol import (
    ENVELOPE_KEY,
    INVOCATION_IDS,
    InvalidInvocationError,
    InvocationIdRule,
    InvocationRequest,
    InvocationState,
    state,
)
from agent_app.runtime._store import InvocationStore

__all__ = ["AgentCoreRuntimeApp"]


class AgentCoreRuntimeApp(BedrockAgentCoreApp):
    """A ``BedrockAgentCoreApp`` with persisted, addressable invocations (ART 0.2.0's ``AgentCoreRuntimeApp``).

    Run one process per Runtime session (as ACR does): records are namespaced by session id, which is no
    access boundary on a shared ``state_dir``. Payloads are not stored; results must be JSON (NaN is not).
    Finishing an invocation never stops the session.

    A subclass may accept other invocation ids (:attr:`invocation_ids`), refuse a new start before it is recorded
    (:meth:`_check_start`) and shape a failed invocation's ``error`` (:meth:`_error_value`).
    """

    #: The invocation ids this app accepts.
    invocation_ids: ClassVar[InvocationIdRule] = INVOCATION_IDS

    def __init__(self, *, background: bool = False, state_dir: str | Path | None = None, **kwargs: Any) -> None:
        """Create the app.

        Args:
            background: run requests without the envelope in the background, under a new id each.
            state_dir: where records live (default: ``.agentcore_runtime`` in the OS temp directory); a
                managed mount keeps them across compute replacement.
            **kwargs: ``BedrockAgentCoreApp``'s arguments.

        Raises:
            OSError: ``state_dir`` is not writable.
        """
        super().__init__(**kwargs)
        self._background = background
        self._store = InvocationStore(state_dir)
        self._lock = asyncio.Lock()
        self._live: dict[str, asyncio.Task[InvocationState]] = {}
        self._requests: set[asyncio.Task[InvocationState]] = set()

    async def _parent_answer(self, request: Request) -> Response:
        # bedrock-agentcore leaves its _handle_invocation unannotated.
        response: Response = await super()._handle_invocation(request)  # type: ignore[no-untyped-call]
        return response

    async def _handle_invocation(self, request: Request) -> Response:
        try:
            payload = await request.json()
        except ValueError:
            return await self._parent_answer(request)  # the parent's answer to a body that is not JSON
        if not isinstance(payload, dict) or (ENVELOPE_KEY not in payload and not self._background):
            return await self._parent_answer(request)
        if ENVELOPE_KEY in payload:
            try:
                invocation = InvocationRequest.parse(payload.pop(ENVELOPE_KEY), self.invocation_ids)
            except ValueError as exc:
                return JSONResponse({"error": str(exc)}, status_code=400)
        else:
            invocation = InvocationRequest("start", uuid.uuid4().hex, background=True)
        handler = self.handlers.get("main")
        if handler is None:
            return JSONResponse({"error": "No entrypoint defined"}, status_code=500)
        context = self._build_request_context(request)
        # The request's work is a task of its own: a client that disconnects never splits a recorded start
        # from the execution it registers.
        task = asyncio.create_task(self._answer(invocation, handler, context, payload))
        self._requests.add(task)
        task.add_done_callback(self._requests.discard)
        task.add_done_callback(self._log_failure)
        try:
            return JSONResponse(await asyncio.shield(task))
        except InvalidInvocationError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        except Exception as exc:
            return JSONResponse({"error": str(exc)}, status_code=500)

    def _check_start(self, payload: dict[str, Any]) -> None:
        """Refuse a new start by raising :class:`InvalidInvocationError` (answered 400, nothing recorded).

        Called only for an invocation id not seen before: a repeated start answers with what is known.
        """

    def _error_value(self, exc: Exception) -> Any:
        """The ``error`` recorded for an invocation whose handler raised ``exc``: its message."""
        return str(exc)

    async def _answer(
        self, invocation: InvocationRequest, handler: Callable[..., Any], context: Any, payload: dict[str, Any]
    ) -> InvocationState:
        """The state to answer with: looked up, or started (and for a waiting start, finished)."""
        session_id = context.session_id or ""
        invocation_id = invocation.invocation_id
        async with self._lock:  # lookups and starts are serialized; handlers run concurrently
            execution = self._live.get(invocation_id)
            known = await asyncio.to_thread(self._store.read, session_id, invocation_id)
            if known is None and execution is not None:
                known = state(invocation_id, "in_progress")
            if known is not None:
                if known["status"] == "in_progress" and execution is None:
                    known = state(invocation_id, "interrupted")  # recorded as started by a process that is gone
                snapshot = known
            elif invocation.operation == "get":
                snapshot = state(invocation_id, "not_found")
            else:
                self._check_start(payload)
                await asyncio.to_thread(self._store.start, session_id, invocation_id)
                busy = self.add_async_task(getattr(handler, "__name__", "invocation"))
                execution = asyncio.create_task(self._execute(invocation_id, busy, handler, context, payload))
                execution.add_done_callback(self._log_failure)
                self._live[invocation_id] = execution
                snapshot = state(invocation_id, "in_progress")
        if invocation.operation == "start" and not invocation.background and execution is not None:
            return await asyncio.shield(execution)
        return snapshot

    async def _execute(
        self, invocation_id: str, busy: int, handler: Callable[..., Any], context: Any, payload: dict[str, Any]
    ) -> InvocationState:
        """Run the handler and record how it finished; an error that cannot be recorded propagates."""
        session_id = context.session_id or ""
        finished = state(invocation_id, "completed")
        try:
            try:
                finished["result"] = await self._invoke_handler(handler, context, self._takes_context(handler), payload)
                await asyncio.to_thread(self._store.finish, session_id, finished)
            except Exception as exc:
                self.logger.exception("Invocation %s failed", invocation_id)
                finished = state(invocation_id, "completed")
                finished["error"] = self._error_value(exc)
                await asyncio.to_thread(self._store.finish, session_id, finished)
            return finished
        finally:
            self._live.pop(invocation_id, None)
            self.complete_async_task(busy)

    def _log_failure(self, task: asyncio.Task[Any]) -> None:
        if not task.cancelled() and (error := task.exception()) is not None:
            self.logger.error("Runtime invocation failed", exc_info=(type(error), error, error.__traceback__))
