"""The start/get envelope of addressable invocations (ART 0.2.0's ``_agentcore_runtime`` protocol, version 1).

A request carries ``{"_agentcore_runtime": {"version": 1, "operation": "start" | "get", "invocation_id": ID,
"background": bool}}`` beside the application payload; the answer is an :class:`InvocationState`:
``{"version": 1, "invocation_id": ID, "status": "in_progress" | "completed" | "interrupted" | "not_found"}``,
a completed one with exactly one of ``result`` (the handler's JSON value) or ``error`` (a string).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, NotRequired, TypedDict

from rollout_contract.invocations import ENVELOPE_KEY, STATUSES, VERSION, InvocationStatus

__all__ = [
    "ENVELOPE_KEY",
    "INVOCATION_IDS",
    "VERSION",
    "InvalidInvocationError",
    "InvocationIdRule",
    "InvocationRequest",
    "InvocationState",
    "checked_state",
    "state",
]

Status = InvocationStatus
_ENVELOPE_FIELDS = frozenset({"version", "operation", "invocation_id", "background"})


class InvocationIdRule(NamedTuple):
    """Which invocation ids an app accepts: the pattern, and its characters in words (for the error)."""

    pattern: re.Pattern[str]
    characters: str


#: The invocation ids ART's runtime accepts.
INVOCATION_IDS = InvocationIdRule(re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}"), "letters, digits, '_' or '-'")


class InvalidInvocationError(ValueError):
    """A request the app refuses before anything is recorded (answered with 400)."""


class InvocationState(TypedDict):
    """What the app answers about one invocation."""

    version: int
    invocation_id: str
    status: Status
    result: NotRequired[Any]
    error: NotRequired[str]


def state(invocation_id: str, status: Status) -> InvocationState:
    """A state without a result or error."""
    return {"version": VERSION, "invocation_id": invocation_id, "status": status}


def _is_version(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value == VERSION


@dataclass(frozen=True)
class InvocationRequest:
    """One envelope: start an invocation (in the background or waiting for it) or get its state."""

    operation: Literal["start", "get"]
    invocation_id: str
    background: bool = False

    @classmethod
    def parse(cls, envelope: object, invocation_ids: InvocationIdRule = INVOCATION_IDS) -> InvocationRequest:
        """Read an envelope whose id follows ``invocation_ids`` (ART's runtime's rule unless another is given).

        Raises:
            ValueError: anything but a version-1 start or get with a valid id; the message names the field.
        """
        if not isinstance(envelope, dict):
            raise ValueError(f"{ENVELOPE_KEY} must be an object")
        if unknown := sorted(set(envelope) - _ENVELOPE_FIELDS):
            raise ValueError(f"{ENVELOPE_KEY} has unknown field(s) {', '.join(unknown)}")
        if not _is_version(envelope.get("version")):
            raise ValueError(f"{ENVELOPE_KEY}.version must be {VERSION}")
        operation = envelope.get("operation")
        if operation not in ("start", "get"):
            raise ValueError(f"{ENVELOPE_KEY}.operation must be 'start' or 'get'")
        invocation_id = envelope.get("invocation_id")
        if not isinstance(invocation_id, str) or not invocation_ids.pattern.fullmatch(invocation_id):
            raise ValueError(
                f"{ENVELOPE_KEY}.invocation_id must be 1-128 {invocation_ids.characters}, starting with a letter or "
                "digit"
            )
        background = envelope.get("background", False)
        if not isinstance(background, bool):
            raise ValueError(f"{ENVELOPE_KEY}.background must be true or false")
        if operation == "get" and "background" in envelope:
            raise ValueError(f"{ENVELOPE_KEY}.background belongs to a start, not a get")
        return cls(operation, invocation_id, background)

    def envelope(self) -> dict[str, Any]:
        """This request as the envelope a client sends (``background`` only on a start)."""
        fields: dict[str, Any] = {"version": VERSION, "operation": self.operation, "invocation_id": self.invocation_id}
        if self.operation == "start":
            fields["background"] = self.background
        return fields


def checked_state(value: object, invocation_id: str) -> InvocationState:
    """``value`` if it is a well-formed state of ``invocation_id``.

    Raises:
        ValueError: it is not (another invocation, an unknown status, a completed state with both or
            neither of ``result`` and ``error``, or a result on an unfinished one).
    """
    if (
        not isinstance(value, dict)
        or not _is_version(value.get("version"))
        or value.get("invocation_id") != invocation_id
        or value.get("status") not in STATUSES
    ):
        raise ValueError(f"the agent's answer is not a state of invocation {invocation_id}: {value!r}"[:500])
    has_result, has_error = "result" in value, "error" in value
    if value["status"] == "completed":
        if has_result == has_error or (has_error and not isinstance(value["error"], str)):
            raise ValueError(f"completed invocation {invocation_id} must carry either a result or an error string")
    elif has_result or has_error:
        raise ValueError(f"invocation {invocation_id} is {value['status']} but carries a result or an error")
    return value  # type: ignore[return-value]
