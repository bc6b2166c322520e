"""The result document: one JSON object per rollout, first writer wins.

ART's fields (``status_code``, ``stop_reason``, ``input_id``, ``s3_bucket``, ``result_key``,
``payload``, ``rewards`` and any user fields) plus a typed terminal :class:`Status`, the ids, timings
and a structured error. :attr:`RolloutResult.reward` is the one rule for the scalar reward.
"""

from __future__ import annotations

import copy
import traceback as traceback_module
from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field

from rollout_contract.keys import ResultKey

REDACTED = "***redacted***"
ROLLOUT_FIELD = "_rollout"
SECRET_ROLLOUT_FIELDS = frozenset({"api_key"})


class Status(StrEnum):
    """How a rollout ended. Every rollout ends in exactly one of these."""

    SUCCEEDED = "succeeded"
    AGENT_ERROR = "agent_error"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    DISPATCH_FAILED = "dispatch_failed"


#: ART's ``status_code`` for each status: 200 and 500 are ART's; the others are ours.
STATUS_CODES: Mapping[Status, int] = {
    Status.SUCCEEDED: 200,
    Status.AGENT_ERROR: 500,
    Status.TIMED_OUT: 504,
    Status.CANCELLED: 499,
    Status.DISPATCH_FAILED: 502,
}


class ErrorInfo(BaseModel):
    """What went wrong: an exception type (or error code), a message, and a traceback if there is one."""

    model_config = ConfigDict(frozen=True)

    type: str
    message: str
    traceback: str | None = None

    @classmethod
    def from_exception(cls, exc: BaseException) -> ErrorInfo:
        """Describe ``exc`` with its full traceback."""
        return cls(
            type=type(exc).__name__,
            message=str(exc),
            traceback="".join(traceback_module.format_exception(exc)),
        )


class Timings(BaseModel):
    """Unix timestamps (seconds) of a rollout's milestones; ``None`` where the writer did not see one."""

    submitted_at: float | None = None
    dispatched_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None

    @property
    def duration_s(self) -> float | None:
        """Seconds from the agent starting the handler to the result."""
        if self.started_at is None or self.finished_at is None:
            return None
        return self.finished_at - self.started_at

    @property
    def dispatch_delay_s(self) -> float | None:
        """Seconds from submission to the invoke (time spent waiting for budget)."""
        if self.submitted_at is None or self.dispatched_at is None:
            return None
        return self.dispatched_at - self.submitted_at


class RolloutResult(BaseModel):
    """A rollout's terminal result, as stored at ``{exp_id}/{input_id}/{session_id}.json``.

    Unknown fields (what the user's handler returned) are kept as extra fields.
    """

    model_config = ConfigDict(extra="allow")

    status: Status
    status_code: int
    stop_reason: str | None = None
    exp_id: str
    input_id: str
    session_id: str
    s3_bucket: str
    result_key: str
    payload: dict[str, Any] | None = None
    rewards: float | list[float] | None = None
    error: ErrorInfo | None = None
    timings: Timings = Field(default_factory=Timings)

    @property
    def reward(self) -> float | None:
        """The scalar reward: ``rewards`` if a number, its last element if a list, else ``None``."""
        if isinstance(self.rewards, list):
            return float(self.rewards[-1]) if self.rewards else None
        return None if self.rewards is None else float(self.rewards)

    @property
    def ok(self) -> bool:
        """Whether the rollout succeeded."""
        return self.status is Status.SUCCEEDED

    @property
    def key(self) -> ResultKey:
        """The ids this result is stored under."""
        return ResultKey(self.exp_id, self.input_id, self.session_id)

    @property
    def user_fields(self) -> dict[str, Any]:
        """What the handler returned beyond the contract's fields."""
        return dict(self.model_extra or {})

    @classmethod
    def terminal(
        cls,
        status: Status,
        *,
        key: ResultKey,
        s3_bucket: str,
        error: ErrorInfo | None = None,
        stop_reason: str | None = None,
        payload: Mapping[str, Any] | None = None,
        timings: Timings | None = None,
    ) -> RolloutResult:
        """Build a result that is not a handler's output (error, timeout, cancel, dispatch failure)."""
        return cls(
            status=status,
            status_code=STATUS_CODES[status],
            stop_reason=stop_reason or (error.message if error else status.value),
            exp_id=key.exp_id,
            input_id=key.input_id,
            session_id=key.session_id,
            s3_bucket=s3_bucket,
            result_key=str(key),
            payload=dict(payload) if payload is not None else None,
            error=error,
            timings=timings or Timings(),
        )

    @classmethod
    def from_handler_output(
        cls,
        output: Mapping[str, Any],
        *,
        key: ResultKey,
        s3_bucket: str,
        payload: Mapping[str, Any] | None,
        timings: Timings,
    ) -> RolloutResult:
        """Build a ``succeeded`` result from a handler's dict, as ART saves it.

        The handler's ``status_code`` and ``stop_reason`` are kept when present (ART's rule); the
        contract's own fields (ids, status, payload, timings) always win over the handler's.
        """
        document: dict[str, Any] = {"status_code": STATUS_CODES[Status.SUCCEEDED], "stop_reason": "end_turn"}
        document.update(output)
        document.update(
            status=Status.SUCCEEDED,
            exp_id=key.exp_id,
            input_id=key.input_id,
            session_id=key.session_id,
            s3_bucket=s3_bucket,
            result_key=str(key),
            payload=dict(payload) if payload is not None else None,
            timings=timings,
            error=None,
        )
        return cls.model_validate(document)

    def to_json_bytes(self) -> bytes:
        """Serialize for S3."""
        return self.model_dump_json().encode()

    @classmethod
    def from_json_bytes(cls, data: bytes | str) -> Self:
        """Parse a stored result object."""
        return cls.model_validate_json(data)


def redact_payload(payload: Mapping[str, Any], extra_keys: Iterable[str] = ()) -> dict[str, Any]:
    """Return a deep copy of ``payload`` with secrets replaced by :data:`REDACTED`.

    ``_rollout.api_key`` is always redacted; ``extra_keys`` names more keys, redacted at any depth.
    """
    redacted = copy.deepcopy(dict(payload))
    names = frozenset(extra_keys)

    def scrub(node: Any) -> None:
        if isinstance(node, dict):
            for name in node:
                if name in names:
                    node[name] = REDACTED
                else:
                    scrub(node[name])
        elif isinstance(node, list):
            for item in node:
                scrub(item)

    scrub(redacted)
    rollout = redacted.get(ROLLOUT_FIELD)
    if isinstance(rollout, dict):
        for name in SECRET_ROLLOUT_FIELDS & rollout.keys():
            rollout[name] = REDACTED
    return redacted
