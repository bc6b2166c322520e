"""One rollout's state in the agent process, and the result document it ends with."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from rollout_contract.keys import ResultKey
from rollout_contract.messages import RolloutSpec, processing_response
from rollout_contract.proof import PROOF_METADATA, sign
from rollout_contract.results import ErrorInfo, RolloutResult, Status, Timings, redact_payload

__all__ = ["Rollout", "RolloutRegistry"]

SHUTDOWN_REASON = "the agent process is shutting down (SIGTERM) before the handler finished"


@dataclass
class Rollout:
    """A rollout this process accepted: its ids, where its result goes, and who ends it.

    Exactly one party ends a rollout: the background run when the handler returns, or the shutdown
    path when the process stops first. :meth:`claim` decides which, once.
    """

    session_id: str
    payload: dict[str, Any]
    spec: RolloutSpec
    key: ResultKey | None
    s3_bucket: str | None
    stored_payload: dict[str, Any]
    #: The session's result-signing key from the dispatcher (``_rollout.proof_key``), held here only; ``None`` when
    #: the agent was invoked without one (then its result is stored unproven).
    proof_key: str | None = field(default=None, repr=False)
    ping_task_id: int | None = None
    started_at: float | None = None
    done: threading.Event = field(default_factory=threading.Event)
    _claimed: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def accept(
        cls,
        payload: dict[str, Any],
        spec: RolloutSpec,
        session_id: str,
        key: ResultKey | None,
        redact_keys: Iterable[str],
        proof_key: str | None = None,
    ) -> Rollout:
        """Build the rollout of one ``/invocations`` request (the stored payload is redacted now)."""
        return cls(
            session_id=session_id,
            payload=payload,
            spec=spec,
            key=key,
            s3_bucket=spec.s3_bucket if key else None,
            stored_payload=redact_payload(payload, redact_keys),
            proof_key=proof_key,
        )

    def proof(self, body: bytes) -> dict[str, str]:
        """The result object's metadata: ``body``'s proof under the session key (none without a key)."""
        return {PROOF_METADATA: sign(self.proof_key, self.session_id, body)} if self.proof_key else {}

    @property
    def saves_result(self) -> bool:
        """Whether the ``_rollout`` block named a place for the result."""
        return self.key is not None

    @property
    def target(self) -> tuple[ResultKey, str]:
        """``(key, s3_bucket)`` of the result; only for a rollout that :attr:`saves_result`."""
        if self.key is None or self.s3_bucket is None:
            raise RuntimeError(f"rollout {self.session_id} saves no result")
        return self.key, self.s3_bucket

    @property
    def response(self) -> dict[str, str]:
        """The immediate answer to ``/invocations`` (the same for every repeat of this session)."""
        if self.key is None:
            return processing_response()
        return processing_response(self.s3_bucket, str(self.key))

    def claim(self) -> bool:
        """Take the right to end this rollout; ``False`` if someone already took it."""
        with self._lock:
            if self._claimed:
                return False
            self._claimed = True
            return True

    def timings(self, finished_at: float) -> Timings:
        """The milestones of this rollout, ending at ``finished_at``."""
        return Timings(
            submitted_at=self.spec.submitted_at,
            dispatched_at=self.spec.dispatched_at,
            started_at=self.started_at,
            finished_at=finished_at,
        )

    def handler_result(self, output: Any, error: BaseException | None, finished_at: float) -> bytes:
        """Encode the result of a handler that returned ``output`` or raised ``error``, as ART saves it.

        A return value that is not a dict, or that JSON cannot hold, fails the rollout as in ART (the
        ``stop_reason`` is the error's message); anything else is stored as returned.
        """
        timings = self.timings(finished_at)
        if error is None and not isinstance(output, dict):
            error = ValueError(f"Return value must be a dict when S3 save is configured, got {type(output).__name__}")
        if error is not None:
            return self._terminal(Status.AGENT_ERROR, timings, error=ErrorInfo.from_exception(error))
        key, s3_bucket = self.target
        result = RolloutResult.from_handler_output(
            output, key=key, s3_bucket=s3_bucket, payload=self.stored_payload, timings=timings
        )
        try:
            return result.to_json_bytes()
        except (TypeError, ValueError) as exc:
            return self._terminal(Status.AGENT_ERROR, timings, error=ErrorInfo.from_exception(exc))

    def cancelled_result(self, now: float | None = None) -> bytes:
        """Encode the result of a rollout the process stopped before its handler finished."""
        return self._terminal(Status.CANCELLED, self.timings(now or time.time()), stop_reason=SHUTDOWN_REASON)

    def _terminal(
        self, status: Status, timings: Timings, *, error: ErrorInfo | None = None, stop_reason: str | None = None
    ) -> bytes:
        key, s3_bucket = self.target
        result = RolloutResult.terminal(
            status,
            key=key,
            s3_bucket=s3_bucket,
            error=error,
            stop_reason=stop_reason,
            payload=self.stored_payload,
            timings=timings,
        )
        return result.to_json_bytes()


class RolloutRegistry:
    """The rollouts this process has accepted, by session id (one per session, ever)."""

    def __init__(self) -> None:
        """Start empty."""
        self._by_session: dict[str, Rollout] = {}
        self._lock = threading.Lock()

    def get_or_add(self, session_id: str, make: Callable[[], Rollout]) -> tuple[Rollout, bool]:
        """Return the session's rollout, making it with ``make`` if it is new; the flag says which."""
        with self._lock:
            existing = self._by_session.get(session_id)
            if existing is not None:
                return existing, False
            rollout = self._by_session[session_id] = make()
            return rollout, True

    def get(self, session_id: str) -> Rollout | None:
        """The session's rollout, if this process accepted one."""
        with self._lock:
            return self._by_session.get(session_id)

    def unfinished(self) -> list[Rollout]:
        """The rollouts whose result is not settled yet."""
        with self._lock:
            return [rollout for rollout in self._by_session.values() if not rollout.done.is_set()]
