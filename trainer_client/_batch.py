"""``run_batch`` and ``run_batch_async``: one core that submits and collects, two ways of waiting.

The core keeps at most ``max_concurrent_sessions`` rollouts in flight, submits in batched sends as
slots free up, turns finished futures into :class:`BatchItem` objects, and fails an item locally when
no result (not even the sweeper's ``timed_out``) came ``deadline_grace_s`` after its deadline. The sync
iterator waits on a ``threading.Event``, the async one on an ``asyncio.Event``; both are woken by the
futures' done callbacks, so a completion costs O(1) whatever the number in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from concurrent.futures import InvalidStateError
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer_client._exceptions import RolloutError, RolloutTimeoutError
from trainer_client._future import RolloutFuture
from trainer_client._results import ClientResult

if TYPE_CHECKING:
    from trainer_client._client import RolloutClient

__all__ = ["BatchItem", "iter_batch", "iter_batch_async"]

Pair = tuple[Mapping[str, Any], str | None]


@dataclass(frozen=True, slots=True)
class BatchItem:
    """One finished rollout of a batch.

    ART's five fields first. Unlike ART, ``success`` means status ``succeeded`` (ART said ``True`` for
    any dict, agent failures included), and a failed rollout still carries its ``result``.

    Attributes:
        success: the rollout succeeded.
        result: its result (``None`` only when none arrived: submit failure or local deadline).
        error: why it failed (a :class:`RolloutError`), ``None`` on success.
        index: position of its payload in the input.
        elapsed: seconds from submission to completion.
        session_id: the rollout id.
        input_id: its group id.
    """

    success: bool
    result: ClientResult | None
    error: BaseException | None
    index: int
    elapsed: float
    session_id: str
    input_id: str | None

    @classmethod
    def from_future(cls, future: RolloutFuture, index: int) -> BatchItem:
        """Describe a finished future."""
        result: ClientResult | None = None
        error = future.exception() if not future.cancelled() else RolloutError("cancelled by the caller")
        if error is None:
            result = future.result()
            try:
                result.raise_for_status()
            except RolloutError as exc:
                error = exc
        return cls(error is None, result, error, index, future.elapsed(), future.session_id, future.input_id)

    def to_record(self) -> dict[str, Any]:
        """A JSON-ready line for a results file: the ids, the outcome, the stored document and its token traces."""
        record: dict[str, Any] = {
            "index": self.index,
            "success": self.success,
            "elapsed_s": round(self.elapsed, 3),
            "session_id": self.session_id,
            "input_id": self.input_id,
        }
        if self.result is not None:
            record.update(status=self.result.status.value, reward=self.result.reward, result=dict(self.result))
            if self.result.token_traces is not None:
                record["token_traces"] = [trace.model_dump(mode="json") for trace in self.result.token_traces]
        if self.error is not None:
            record["error"] = str(self.error)
        return record


class _BatchCore:
    """Submission and collection state shared by both iterators (no waiting here)."""

    def __init__(
        self,
        client: RolloutClient,
        pairs: Iterable[Pair],
        max_concurrent: int,
        timeout: float,
        journal: str | Path | None,
        overrides: Mapping[str, Any],
    ) -> None:
        if max_concurrent < 1:
            raise ValueError(f"max_concurrent_sessions must be at least 1, got {max_concurrent}")
        self._client = client
        self._source = enumerate(pairs)
        self._max = max_concurrent
        self._timeout = timeout
        self._journal = journal
        self._overrides = overrides
        self._grace = client.poll_settings.deadline_grace_s
        self._in_flight: dict[RolloutFuture, int] = {}
        self._done: deque[RolloutFuture] = deque()
        self._deadlines: list[tuple[float, int, RolloutFuture]] = []
        self._order = itertools.count()
        self._exhausted = False
        self.wake: Callable[[], None] = lambda: None

    @property
    def finished(self) -> bool:
        """Every payload was submitted and every item handed out."""
        return self._exhausted and not self._in_flight

    def submit_ready(self) -> None:
        """Submit payloads until ``max_concurrent`` are in flight or the input runs out."""
        free = self._max - len(self._in_flight)
        if self._exhausted or free <= 0:
            return
        batch = list(itertools.islice(self._source, free))
        if len(batch) < free:
            self._exhausted = True
        if not batch:
            return
        futures = self._client.submit(
            [pair for _, pair in batch], timeout=self._timeout, journal=self._journal, **self._overrides
        )
        for (index, _), future in zip(batch, futures, strict=True):
            self._in_flight[future] = index
            heapq.heappush(self._deadlines, (future.deadline_at or float("inf"), next(self._order), future))
            future.add_done_callback(self._on_done)

    def _on_done(self, future: RolloutFuture) -> None:
        self._done.append(future)
        self.wake()

    def take_items(self) -> list[BatchItem]:
        """Turn the futures finished since the last call into items."""
        items = []
        while self._done:
            future = self._done.popleft()
            items.append(BatchItem.from_future(future, self._in_flight.pop(future)))
        return items

    def next_wait(self) -> float | None:
        """Fail items past deadline + grace; return seconds until the next such moment (``None``: none)."""
        now = time.time()
        while self._deadlines:
            deadline, _, future = self._deadlines[0]
            if future.done():
                heapq.heappop(self._deadlines)
            elif deadline + self._grace <= now:
                heapq.heappop(self._deadlines)
                error = RolloutTimeoutError(
                    f"no result for rollout {future.session_id} {self._grace:.0f} s after its deadline; "
                    "is the sweeper running?"
                )
                with contextlib.suppress(InvalidStateError):
                    future.set_exception(error)
            else:
                return deadline + self._grace - now
        return None


def iter_batch(
    client: RolloutClient,
    pairs: Iterable[Pair],
    max_concurrent: int,
    timeout: float,
    journal: str | Path | None,
    overrides: Mapping[str, Any],
) -> Iterator[BatchItem]:
    """Run a batch, blocking the calling thread while it waits."""
    core = _BatchCore(client, pairs, max_concurrent, timeout, journal, overrides)
    event = threading.Event()
    core.wake = event.set

    def run() -> Iterator[BatchItem]:
        while True:
            core.submit_ready()
            items = core.take_items()
            yield from items
            if core.finished:
                return
            wait = core.next_wait()
            if not items:
                event.wait(wait)
                event.clear()

    return run()


def iter_batch_async(
    client: RolloutClient,
    pairs: Iterable[Pair],
    max_concurrent: int,
    timeout: float,
    journal: str | Path | None,
    overrides: Mapping[str, Any],
) -> AsyncIterator[BatchItem]:
    """Run a batch from asyncio: submissions run in a worker thread, waiting never blocks the loop."""
    core = _BatchCore(client, pairs, max_concurrent, timeout, journal, overrides)

    async def run() -> AsyncIterator[BatchItem]:
        loop = asyncio.get_running_loop()
        event = asyncio.Event()

        def wake() -> None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(event.set)

        core.wake = wake
        while True:
            await asyncio.to_thread(core.submit_ready)
            items = core.take_items()
            for item in items:
                yield item
            if core.finished:
                return
            wait = core.next_wait()
            if not items:
                try:
                    await asyncio.wait_for(event.wait(), wait)
                except TimeoutError:
                    pass
                event.clear()

    return run()
