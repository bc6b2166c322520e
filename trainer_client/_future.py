"""``RolloutFuture``: a ``concurrent.futures.Future`` for one rollout, awaitable from asyncio, with ART's surface."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Generator
from concurrent.futures import CancelledError, Future
from typing import TYPE_CHECKING, Any

from rollout_contract import ResultKey
from trainer_client._exceptions import RolloutError
from trainer_client._results import ClientResult

__all__ = ["CancelledFlag", "RolloutFuture"]

logger = logging.getLogger("trainer_client")

#: What :meth:`RolloutFuture.time_until_next_poll` answers for a pending future: a loop written for ART's
#: S3 polling checks ``done()`` (free here: the poller pushes results) at most this often.
POLL_HINT_S = 0.05


class CancelledFlag:
    """Whether a future was cancelled: truthy like ART's ``cancelled`` property, callable like ``Future.cancelled()``.

    ``if future.cancelled:`` (ART) and ``future.cancelled()`` (``concurrent.futures``, and ``asyncio.wrap_future``
    which calls it) both work; ``future.cancelled == True`` compares the state. ``is True`` does not.
    """

    __slots__ = ("_future",)

    def __init__(self, future: Future[Any]) -> None:
        self._future = future

    def __call__(self) -> bool:
        return Future.cancelled(self._future)

    def __bool__(self) -> bool:
        return self()

    def __eq__(self, other: object) -> bool:
        return self() == other if isinstance(other, bool | CancelledFlag) else NotImplemented

    def __hash__(self) -> int:
        return hash(self())

    def __repr__(self) -> str:
        return repr(self())


class RolloutFuture(Future[ClientResult]):
    """The pending result of one rollout, resolved by the client's completion poller.

    ``result()`` returns the :class:`ClientResult` for every terminal status (``succeeded``,
    ``agent_error``, ``timed_out``, ``cancelled``, ``dispatch_failed``); call
    ``result().raise_for_status()`` to turn failures into exceptions.

    ``cancel()`` follows ART: the future is cancelled at once, so ``result()`` raises
    ``concurrent.futures.CancelledError``, and a cancel request goes to the dispatcher, which ends the
    rollout as ``cancelled`` (unless it already ended) and stops its session. The stored result can
    still be read with ``client.attach``. Cancelling an asyncio task that awaits the future does not
    cancel the rollout. As in ART, ``result(timeout)`` and ``result_async(timeout)`` cancel the rollout
    when the timeout passes (``cancel_on_timeout=False`` keeps it running, ``concurrent.futures``' way).

    ART's polling surface is here too (``done_async``, ``cancel_async``, ``ready_to_poll``,
    ``time_until_next_poll``, ``cancelled`` usable as a flag), so loops written for ART's S3 polling run.

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
        self._cancel_lock = threading.Lock()
        self._started = time.monotonic()
        self._finished: float | None = None
        self.add_done_callback(self._stop_clock)

    def _stop_clock(self, _: Future[ClientResult]) -> None:
        self._finished = time.monotonic()

    def elapsed(self) -> float:
        """Seconds since the future was created, frozen when it resolves."""
        return (self._finished or time.monotonic()) - self._started

    def result(self, timeout: float | None = None, *, cancel_on_timeout: bool = True) -> ClientResult:
        """Wait for the rollout's result.

        Args:
            timeout: seconds to wait at most; ``None`` waits until the result arrives.
            cancel_on_timeout: cancel the rollout when ``timeout`` passes (ART's behaviour); ``False``
                leaves it running and the future pending.

        Returns:
            The result, whatever the terminal status.

        Raises:
            TimeoutError: no result within ``timeout``.
            concurrent.futures.CancelledError: the future was cancelled.
        """
        try:
            return super().result(timeout)
        except TimeoutError:
            if cancel_on_timeout:
                self._cancel_quietly()
            raise

    async def result_async(self, timeout: float | None = None, *, cancel_on_timeout: bool = True) -> ClientResult:
        """Await the rollout's result without blocking the event loop (same contract as :meth:`result`)."""
        try:
            return await asyncio.wait_for(self._awaited(), timeout)
        except TimeoutError:
            if cancel_on_timeout:
                await asyncio.to_thread(self._cancel_quietly)
            raise

    def __await__(self) -> Generator[Any, None, ClientResult]:
        return self._awaited().__await__()

    async def _awaited(self) -> ClientResult:
        """The result, awaited; a cancelled rollout raises ``concurrent.futures.CancelledError`` as ``result()``
        does (asyncio's own ``CancelledError`` would read as the awaiting task being cancelled)."""
        try:
            return await asyncio.shield(asyncio.wrap_future(self))
        except asyncio.CancelledError:
            if Future.cancelled(self):
                raise CancelledError(f"rollout {self.session_id} was cancelled") from None
            raise

    def cancel(self) -> bool:
        """Cancel the rollout; ``False`` if it already ended or was cancelled before (ART's answer).

        Raises:
            SubmitError: the cancel request could not be sent (the future is cancelled all the same).
        """
        with self._cancel_lock:
            if Future.cancelled(self) or not super().cancel():
                return False
        if self._on_cancel is not None:
            self._on_cancel(self)
        return True

    async def cancel_async(self) -> bool:
        """:meth:`cancel` without blocking the event loop (the cancel request is sent from a thread)."""
        return await asyncio.to_thread(self.cancel)

    @property  # a flag that is also callable: see CancelledFlag
    def cancelled(self) -> CancelledFlag:
        """Whether the future was cancelled: ``if future.cancelled:`` (ART) and ``future.cancelled()`` both work."""
        return CancelledFlag(self)

    async def done_async(self) -> bool:
        """:meth:`done` for ART's async loops (no I/O here: the poller pushes the result)."""
        return self.done()

    def ready_to_poll(self) -> bool:
        """Always ``True``: ``done()`` costs nothing here, so there is no poll interval to wait out (ART's has one)."""
        return True

    def time_until_next_poll(self) -> float:
        """Seconds a loop written for ART's polling should sleep before checking ``done()`` again.

        0 once the future is done; else :data:`POLL_HINT_S`, so such a loop neither spins nor waits long.
        """
        return 0.0 if self.done() else POLL_HINT_S

    def _cancel_quietly(self) -> None:
        try:
            self.cancel()
        except RolloutError as exc:
            logger.warning("could not cancel rollout %s after its timeout: %s", self.session_id, exc)

    def __repr__(self) -> str:
        return f"<RolloutFuture {self.session_id} {self._state.lower()}>"
