"""``SandboxApp``: ART 0.2.0's sandbox daemon (``agentcore-sandboxd``) as an ``agent_app`` runtime app.

Commands are invocations of :class:`~agent_app.runtime.AgentCoreRuntimeApp`: started in the foreground or the
background, looked up by id, never started twice, recorded so a restarted process answers ``interrupted`` for
what it lost, and ``/ping`` is ``HealthyBusy`` while one runs. This app adds the session actions (``start``
holds the session busy, ``stop`` releases it, ``status`` reports it), ART's sandbox rules for ids (dots
allowed), requests (checked before anything is recorded: 400) and failures (``{"code": "execution_failed",
"message": ...}``), and runs each command as ART's daemon does (``agent_app.sandbox._command``), confined in the
strict isolation (``agent_app.confinement``): as the sandbox user, in its workspace (given to that user), the
command records hidden.
"""

from __future__ import annotations

import asyncio
import functools
import tempfile
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from agent_app.confinement import Confinement, ConfinementError, Isolation, isolation_mode
from agent_app.runtime import AgentCoreRuntimeApp
from agent_app.runtime._protocol import ENVELOPE_KEY, InvocationIdRule
from agent_app.sandbox._command import Command, run
from rollout_contract.protocol import PingStatus
from rollout_contract.sandbox import (
    ACTION_FIELD,
    ACTION_START,
    ACTION_STATUS,
    ACTION_STOP,
    EXECUTION_FAILED,
    INVOCATION_ID_PATTERN,
    STATE_BUSY,
    STATE_HEALTHY,
    TTL_FIELD,
)

__all__ = ["SandboxApp"]

#: Where command records live unless the app is given a directory.
DEFAULT_STATE_DIR = Path(tempfile.gettempdir()) / "agentcore-sandbox"


class SandboxApp(AgentCoreRuntimeApp):
    """Serves ART's sandbox protocol on ``/invocations`` (see ``rollout_contract.sandbox``); one process per session.

    Example:
        SandboxApp().run()  # what ``python -m agent_app.sandbox`` does, on ``$PORT`` (default 8080)
    """

    invocation_ids = InvocationIdRule(INVOCATION_ID_PATTERN, "letters, digits, '.', '_' or '-'")

    def __init__(
        self,
        *,
        state_dir: str | Path | None = None,
        workspace: str | Path | None = None,
        isolation: Isolation | None = None,
        **kwargs: Any,
    ) -> None:
        """Create the app.

        Args:
            state_dir: where command records live (default: ``agentcore-sandbox`` in the OS temp directory).
            workspace: the directory commands run in unless they name one; the strict isolation needs it and
                gives it to the sandbox user (``python -m agent_app.sandbox`` passes its current directory).
            isolation: how commands run (default: :func:`~agent_app.confinement.isolation_mode`).
            **kwargs: ``BedrockAgentCoreApp``'s arguments.

        Raises:
            OSError: ``state_dir`` is not writable.
            ConfinementError: the strict isolation without a ``workspace``, or asked for by a process not root.
        """
        state_dir = Path(state_dir or DEFAULT_STATE_DIR)
        super().__init__(state_dir=state_dir, **kwargs)
        self._hold: int | None = None
        self._hold_timer: asyncio.TimerHandle | None = None
        confined = None
        if (isolation or isolation_mode()) is Isolation.STRICT:
            if workspace is None:
                raise ConfinementError("the strict isolation confines commands to a workspace: give workspace=DIR")
            confined = str(Path(workspace).resolve())
            Confinement(cpu_s=1).own(confined)
        self.entrypoint(functools.partial(run_command, workspace=confined, hidden=(str(state_dir.resolve()),)))

    async def _handle_invocation(self, request: Request) -> Response:
        try:
            payload = await request.json()
        except ValueError:
            return await super()._handle_invocation(request)  # the parent's 400 for a body that is not JSON
        if not isinstance(payload, dict):
            return _refused("the body must be a JSON object")
        if ENVELOPE_KEY in payload:
            return await super()._handle_invocation(request)
        return self._session_action(payload)

    def _session_action(self, payload: dict[str, Any]) -> Response:
        action = payload.get(ACTION_FIELD)
        if action == ACTION_START:
            ttl = payload.get(TTL_FIELD)
            if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int | float) or not ttl > 0):
                return _refused(f"{TTL_FIELD} must be a positive number of seconds, got {ttl!r}")
            self._take_hold(ttl)
        elif action == ACTION_STOP:
            self._release_hold()
        elif action != ACTION_STATUS:
            return _refused(f"unknown action: {action}" if action else "missing action")
        busy = self.get_current_ping_status().value == PingStatus.HEALTHY_BUSY
        return JSONResponse({"status": "ok", "state": STATE_BUSY if busy else STATE_HEALTHY})

    def _take_hold(self, ttl_s: float | None) -> None:
        """Keep the session busy until ``stop`` (or ``ttl_s`` seconds, when given; a new start replaces it)."""
        if self._hold is None:
            self._hold = self.add_async_task("sandbox session")
        if self._hold_timer is not None:
            self._hold_timer.cancel()
            self._hold_timer = None
        if ttl_s is not None:
            self._hold_timer = asyncio.get_running_loop().call_later(ttl_s, self._release_hold)

    def _release_hold(self) -> None:
        if self._hold_timer is not None:
            self._hold_timer.cancel()
            self._hold_timer = None
        if self._hold is not None:
            self.complete_async_task(self._hold)
            self._hold = None

    def _check_start(self, payload: dict[str, Any]) -> None:
        Command.parse(payload)

    def _error_value(self, exc: Exception) -> dict[str, str]:
        return {"code": EXECUTION_FAILED, "message": f"{type(exc).__name__}: {exc}"}


def run_command(payload: dict[str, Any], *, workspace: str | None, hidden: tuple[str, ...]) -> dict[str, Any]:
    """The app's entrypoint: run one (already checked) command request, confined to ``workspace`` if given."""
    return run(Command.parse(payload), workspace=workspace, hidden=hidden)


def _refused(message: str) -> Response:
    return JSONResponse({"status": "error", "error": message}, status_code=400)
