"""ART 0.2.0's envelope for addressable invocations, shared by its ``runtime`` and ``sandbox`` packages.

A request carries ``{"_agentcore_runtime": {"version": 1, "operation": "start" | "get", "invocation_id": ID,
"background": bool}}`` beside its payload; the answer is ``{"version": 1, "invocation_id": ID, "status": ...}``
with one of :data:`STATUSES`, a completed one with ``result`` or ``error``.
"""

from __future__ import annotations

from typing import Literal

ENVELOPE_KEY = "_agentcore_runtime"
VERSION = 1
OPERATION_START = "start"
OPERATION_GET = "get"
InvocationStatus = Literal["in_progress", "completed", "interrupted", "not_found"]
IN_PROGRESS: InvocationStatus = "in_progress"
COMPLETED: InvocationStatus = "completed"
STATUSES: tuple[InvocationStatus, ...] = ("in_progress", "completed", "interrupted", "not_found")
