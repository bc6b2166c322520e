"""Sandbox sessions: ART 0.2.0's sandbox protocol and this pipeline's rules for sandboxes.

A sandbox is an ACR session whose container serves ART's ``agentcore-sandboxd`` protocol on ``/invocations``
(``agent_app.sandbox`` serves it); the trainer's agent loop runs commands in it (``trainer_client.sandbox``).

The wire, as ART 0.2.0's ``SandboxClient`` speaks it:

- ``{"action": "start" | "stop" | "status"}`` holds, releases or reports the session (``/ping`` says
  ``HealthyBusy`` while it is held or a command runs); the answer is ``{"status": "ok", "state": "busy" |
  "healthy"}``. ``ttl_seconds`` on a start (ours; ART's daemon ignores unknown fields) releases the hold by
  itself after that long.
- a command: ``{"_agentcore_runtime": {"version": 1, "operation": "start" | "get", "invocation_id": ID,
  "background": bool}, "command": [argv...], "cwd": ..., "env": {...}, "timeout": seconds}``, answered with
  ``{"version": 1, "invocation_id": ID, "status": "in_progress" | "completed" | "interrupted" | "not_found"}``;
  a completed one carries ``result`` (:data:`RESULT_FIELD_TYPES`) or ``error`` (``{"code", "message"}``).

Sandbox sessions hold a session slot and spend invoke tokens of the same budgets as rollouts. Their session ids
start with :data:`SANDBOX_SESSION_PREFIX`, which rollouts may not use: the sweeper tells a sandbox from a
rollout by its id (a sandbox past its deadline is stopped, and no result is written for it), and the trainer's
grant to write sessions-table items covers only sandbox keys.
"""

from __future__ import annotations

import re
import uuid

from rollout_contract.protocol import DEFAULT_MAX_LIFETIME_S

#: Every sandbox's session id starts with this; no rollout's may.
SANDBOX_SESSION_PREFIX = "sandbox-"
#: Seconds a sandbox lives unless its ``start`` says otherwise; the sweeper stops it then if nobody terminated it.
DEFAULT_SANDBOX_TIMEOUT_S = 3600.0
#: The longest a sandbox may live: ACR's maximum session lifetime.
MAX_SANDBOX_TIMEOUT_S = float(DEFAULT_MAX_LIFETIME_S)
#: The ``input_id`` a sandbox's sessions-table item carries when its ``start`` names none.
DEFAULT_SANDBOX_LABEL = "sandbox"

# The session actions (requests without the ``_agentcore_runtime`` envelope).
ACTION_FIELD = "action"
ACTION_START = "start"
ACTION_STOP = "stop"
ACTION_STATUS = "status"
#: On a start: release the hold by itself after this many seconds (ours; ART's daemon ignores it).
TTL_FIELD = "ttl_seconds"
STATE_BUSY = "busy"
STATE_HEALTHY = "healthy"

# A command's request fields (besides the envelope).
COMMAND_FIELD = "command"
CWD_FIELD = "cwd"
ENV_FIELD = "env"
TIMEOUT_FIELD = "timeout"
#: ``true`` grants the command the session's network (ours; without it a confined command has none).
NETWORK_FIELD = "network"
#: A command's execution deadline in seconds, output waiting included: the default and the bounds.
DEFAULT_EXEC_TIMEOUT_S = 300
MIN_EXEC_TIMEOUT_S = 1
MAX_EXEC_TIMEOUT_S = 3600
#: Bytes of each output stream a result keeps (the command's output is drained past it).
OUTPUT_LIMIT_BYTES = 256 * 1024
#: A completed command's ``result``, each field's JSON type: exit code (-1: ended by a signal), output, and flags.
RESULT_FIELD_TYPES: dict[str, type] = {
    "exit_code": int,
    "stdout": str,
    "stderr": str,
    "timed_out": bool,
    "stdout_truncated": bool,
    "stderr_truncated": bool,
}
#: The ``error.code`` of a command that could not be run (no such executable, no such ``cwd``).
EXECUTION_FAILED = "execution_failed"
#: Invocation ids a sandbox accepts (ART's sandbox client's rule: dots allowed, unlike ART's runtime's).
INVOCATION_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def new_sandbox_session_id() -> str:
    """A fresh sandbox session id: :data:`SANDBOX_SESSION_PREFIX` and a uuid4 (44 characters)."""
    return f"{SANDBOX_SESSION_PREFIX}{uuid.uuid4()}"


def is_sandbox_session(session_id: str) -> bool:
    """Whether ``session_id`` names a sandbox (not a rollout)."""
    return session_id.startswith(SANDBOX_SESSION_PREFIX)
