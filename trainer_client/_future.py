"""``RolloutFuture``: a ``concurrent.futures.Future`` for one rollout, awaitable from asyncio."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Generator
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from rollout_contract import ResultKey
from trainer_client._results import ClientResult

__all__ = ["RolloutFuture"]


class RolloutFuture(Future[ClientResult]):
    """The pending result of one rollout, resolved by the client's completion poller.

    ``result()`` returns the :class:`ClientResult` for every terminal status (``succeeded``,
    ``agent_error``, ``timed_out``, ``cancelled``, ``dispatch_failed``); call
    ``result().raise_for_status()`` to turn failures into exceptions.

    ``cancel()`` follows ART: the future is cancelled at once, so ``result()`` raises
    ``concurrent.futures.CancelledError``, and a cancel request goes to the dispatcher, which ends the
    rollout as ``cancelled`` (unless it already ended) and stops its session. The stored result can
    still be read with ``client.attach``. Cancelling an asyncio task that awaits the future does not
    cancel the rollout.

    Attributes:
        session_id: the rollout's session (= rollout) id.
        input_id: the group (prompt) this rollout belongs to (``None`` if attached by session id alone).
        result_key: the S3 key its result is written to (``None`` if attached by session id alone).
        s3_bucket: the results bucket.
        deadline_at: Unix time by which it has ended at the latest: its timeout runs from its start, which
            comes at the latest ``queue_timeout`` after the submit (``None`` if unknown).
        event_sent_at: Unix time its result event reached the completion queue (the message's SQS
            ``SentTimestamp``), set by the poller before it resolves the future; ``None`` until then, and for
            results read directly from S3 (``attach``).
    """

    if TYPE_CHECKING:
        # Callbacks receive this future, not a plain one (typeshed types them for ``Future``).
        def add_done_callback(self, fn: Callable[[RolloutFuture], object]) -> None: ...

    def __init__(
        self,
        key: ResultKey,
        s3_bucket: str,
        *,
        deadline_at: float | None = None,
        on_cancel: Callable[[RolloutFuture], None] | None = None,
    ) -> None:
        super().__init__()
        self.session_id = key.session_id
        self.input_id = key.input_id or None
        self.result_key = str(key) if key.input_id else None
        self.s3_bucket = s3_bucket
        self.deadline_at = deadline_at
        self.event_sent_at: float | None = None
        self._on_cancel = on_cancel
        self._started = time.monotonic()
        self._finished: float | None = None
        self.add_done_callback(self._stop_clock)

    def _stop_clock(self, _: Future) -> None:
        self._finished = time.monotonic()

    def elapsed(self) -> float:
        """Seconds since the future was created, frozen when it resolves."""
        return (self._finished or time.monotonic()) - self._started

    def result(self, timeout: float | None = None) -> ClientResult:
        """Wait for the rollout's result.

        Args:
            timeout: seconds to wait at most; ``None`` waits until the result arrives.

        Returns:
            The result, whatever the terminal status.

        Raises:
            TimeoutError: no result within ``timeout`` (the rollout keeps running).
            concurrent.futures.CancelledError: the future was cancelled.
        """
        return super().result(timeout)

    async def result_async(self, timeout: float | None = None) -> ClientResult:
        """Await the rollout's result without blocking the event loop (same contract as :meth:`result`)."""
        return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(self)), timeout)

    def __await__(self) -> Generator[Any, None, ClientResult]:
        return asyncio.shield(asyncio.wrap_future(self)).__await__()

    def cancel(self) -> bool:
        """Cancel the rollout; return ``False`` if it already ended (see the class docstring)."""
        if not super().cancel():
            return False
        if self._on_cancel is not None:
            self._on_cancel(self)
        return True

    def __repr__(self) -> str:
        return f"<RolloutFuture {self.session_id} {self._state.lower()}>"
