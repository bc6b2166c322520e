"""``run_batch`` and ``run_batch_async`` (ART's ``BatchResult``, ``AsyncBatchResult``): one core, two ways of waiting.

The core keeps at most ``max_concurrent_sessions`` rollouts in flight, submits in batched sends as
slots free up and turns finished futures into :class:`BatchItem` objects (a future whose result event
never came is settled by the client's deadline fallback, ``trainer_client._deadlines``). The sync
iterator waits on a ``threading.Event``, the async one on an ``asyncio.Event``; both are woken by the
futures' done callbacks, so a completion costs O(1) whatever the number in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field

from rollout_contract import Status
from rollout_contract.settings import Settings
from trainer_client._exceptions import RolloutCancelledError, RolloutError
from trainer_client._future import RolloutFuture
from trainer_client._results import ClientResult, TokenTrace

if TYPE_CHECKING:
    from trainer_client._client import RolloutClient

__all__ = ["AsyncBatchResult", "BatchItem", "BatchResult", "BatchSettings"]

logger = logging.getLogger("trainer_client")

Pair = tuple[Mapping[str, Any], str | None]


@dataclass(frozen=True, slots=True)
class BatchItem:
    """One finished rollout of a batch.

    ART's five fields first (``error`` a string, as in ART). Unlike ART, ``success`` means status
    ``succeeded`` (ART said ``True`` for any dict, agent failures included), and a failed rollout still
    carries its ``result``.

    Attributes:
        success: the rollout succeeded.
        result: its result (``None`` only when none arrived: submit failure, or nothing stored after the deadline).
        error: why it failed (``"AgentError: rollout ... ended agent_error: ..."``), ``None`` on success.
        index: position of its payload in the input.
        elapsed: seconds from submission to completion.
        session_id: the rollout id.
        input_id: its group id.
        exception: the :class:`RolloutError` that ``error`` describes (its family says what failed).
    """

    success: bool
    result: ClientResult | None
    error: str | None
    index: int
    elapsed: float
    session_id: str
    input_id: str | None
    exception: BaseException | None = None

    @classmethod
    def from_future(cls, future: RolloutFuture, index: int) -> BatchItem:
        """Describe a finished future."""
        result: ClientResult | None = None
        error = future.exception() if not future.cancelled() else RolloutCancelledError("cancelled by the caller")
        if error is None:
            result = future.result()
            try:
                result.raise_for_status()
            except RolloutError as exc:
                error = exc
        message = None if error is None else f"{type(error).__name__}: {error}"
        return cls(error is None, result, message, index, future.elapsed(), future.session_id, future.input_id, error)

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> BatchItem:
        """The item a results file's line (:meth:`to_record`) describes: an earlier run's, carried into a resume."""
        result: ClientResult | None = None
        if "result" in record:
            result = ClientResult(record["result"])
            if "token_traces" in record:
                result.token_traces = [TokenTrace.model_validate(trace) for trace in record["token_traces"]]
        return cls(
            bool(record["success"]),
            result,
            record.get("error"),
            int(record["index"]),
            float(record["elapsed_s"]),
            str(record["session_id"]),
            record.get("input_id"),
        )

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
        elif isinstance(self.exception, RolloutCancelledError):
            record["status"] = Status.CANCELLED.value  # cancelled by this process before a result was stored
        if self.error is not None:
            record["error"] = self.error
        return record


class BatchSettings(Settings):
    """How one batch runs: ``max_concurrent_sessions`` in flight, each with ``timeout``; ART's polling keywords.

    ``initial_interval``, ``max_interval`` and ``backoff_factor`` set ART's S3 HEAD polling; completion here
    is an event, so they change nothing (accepted so ART's calls run). ``log_interval`` is ART's: seconds
    between ``[Status]`` log lines (INFO, logger ``trainer_client``) while rollouts are in flight.
    """

    #: ART's argument is ``max_concurrent_sessions``, its ``BatchResult`` attribute ``max_concurrent``.
    max_concurrent: int = Field(ge=1, alias="max_concurrent_sessions")
    timeout: float
    journal: str | Path | None = None
    overrides: Mapping[str, Any] = Field(default_factory=dict)
    initial_interval: float = 0.5
    max_interval: float = 30.0
    backoff_factor: float = 1.5
    log_interval: float = 30.0


class _BatchCore:
    """Submission and collection state shared by both iterators (no waiting here)."""

    def __init__(self, client: RolloutClient, pairs: Iterable[Pair], settings: BatchSettings) -> None:
        self._client = client
        self._source = enumerate(pairs)
        self._settings = settings
        self._in_flight: dict[RolloutFuture, int] = {}
        self._done: deque[RolloutFuture] = deque()
        self._exhausted = False
        self._finished_count = 0
        self._next_log = time.monotonic() + settings.log_interval
        self.wake: Callable[[], None] = lambda: None

    @property
    def finished(self) -> bool:
        """Every payload was submitted and every item handed out."""
        return self._exhausted and not self._in_flight

    def submit_ready(self) -> None:
        """Submit payloads until ``max_concurrent`` are in flight or the input runs out."""
        free = self._settings.max_concurrent - len(self._in_flight)
        if self._exhausted or free <= 0:
            return
        batch = list(itertools.islice(self._source, free))
        if len(batch) < free:
            self._exhausted = True
        if not batch:
            return
        futures = self._client.submit(
            [pair for _, pair in batch],
            timeout=self._settings.timeout,
            journal=self._settings.journal,
            **self._settings.overrides,
        )
        for (index, _), future in zip(batch, futures, strict=True):
            self._in_flight[future] = index
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
        self._finished_count += len(items)
        return items

    def unfinished(self) -> list[BatchItem]:
        """Items of every rollout started and not handed out yet, as it is now (see :meth:`BatchResult.unfinished`)."""
        items = self.take_items()
        for future, index in list(self._in_flight.items()):
            if future.done():
                items.append(BatchItem.from_future(future, index))
            else:
                error = "still running when the batch was left (collect it with its journal)"
                items.append(BatchItem(False, None, error, index, future.elapsed(), future.session_id, future.input_id))
            del self._in_flight[future]
        return items

    def next_wait(self) -> float | None:
        """Log the status when due; seconds until the next status line (``None``: nothing in flight)."""
        wait = self._log_status_when_due()
        return None if wait == float("inf") else wait

    def _log_status_when_due(self) -> float:
        """ART's ``[Status]`` line every ``log_interval`` while rollouts are in flight; seconds to the next."""
        if not self._in_flight:
            return float("inf")
        now = time.monotonic()
        if now >= self._next_log:
            elapsed = [future.elapsed() for future in self._in_flight]
            logger.info(
                "[Status] %d active, %d done, elapsed: %.0fs-%.0fs",
                len(self._in_flight),
                self._finished_count,
                min(elapsed),
                max(elapsed),
            )
            self._next_log = now + self._settings.log_interval
        return max(self._next_log - now, 0.0)


class _BatchRun:
    """What both batch iterators hold: ART's ``BatchResult`` attributes and the core."""

    def __init__(self, client: RolloutClient, pairs: Iterable[Pair], settings: BatchSettings) -> None:
        self._core = _BatchCore(client, pairs, settings)
        self.client = client
        self.max_concurrent = settings.max_concurrent
        self.timeout = settings.timeout
        self.initial_interval = settings.initial_interval
        self.max_interval = settings.max_interval
        self.backoff_factor = settings.backoff_factor
        self.log_interval = settings.log_interval

    def unfinished(self) -> list[BatchItem]:
        """After the iteration was left (Ctrl-C, ``break``): an item for every rollout the batch started and did not
        hand out, as it is now: ended ones with their result, cancelled ones as cancelled, running ones without a
        result (``error`` says so). Cancel first (``client.cancel_pending()``) to have none running."""
        return self._core.unfinished()


class BatchResult(_BatchRun, Iterator[BatchItem]):
    """``run_batch``'s items in completion order (ART's ``BatchResult``); it blocks the calling thread while it waits.

    Nothing is submitted before the first item is asked for. It is an iterator: one pass runs the batch once.
    """

    def __init__(self, client: RolloutClient, pairs: Iterable[Pair], settings: BatchSettings) -> None:
        super().__init__(client, pairs, settings)
        self._items = self._run()

    def __iter__(self) -> BatchResult:
        return self

    def __next__(self) -> BatchItem:
        return next(self._items)

    def _run(self) -> Iterator[BatchItem]:
        core = self._core
        event = threading.Event()
        core.wake = event.set
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


class AsyncBatchResult(_BatchRun, AsyncIterator[BatchItem]):
    """``run_batch_async``'s items (ART's ``AsyncBatchResult``): submissions run in a worker thread, waiting never
    blocks the event loop."""

    def __init__(self, client: RolloutClient, pairs: Iterable[Pair], settings: BatchSettings) -> None:
        super().__init__(client, pairs, settings)
        self._items = self._run()

    def __aiter__(self) -> AsyncBatchResult:
        return self

    async def __anext__(self) -> BatchItem:
        return await anext(self._items)

    async def _run(self) -> AsyncIterator[BatchItem]:
        core = self._core
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
