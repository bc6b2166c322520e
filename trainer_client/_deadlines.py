"""The deadline fallback: a future whose result event never came looks for its stored result itself (D56).

S3 -> EventBridge -> SQS is at least once, yet an event can still be lost to the trainer: a rule an operator
edited, a purged queue, a message moved to the dead-letter queue. So no future waits past its rollout's deadline
blind. A pending future is first checked when its rollout could have ended at the earliest (submit + timeout +
``grace_s``), then as its sessions item says:

- finished: its result is stored; read it (GetObject) and resolve;
- running (its real deadline known): checked again at deadline + ``grace_s``, when the sweeper has ended it;
- not started (queued, admitted, or not recorded yet while it waits for a session slot): checked again when it
  could have ended at the earliest, never after its latest deadline (start limit + timeout);
- past deadline + ``grace_s`` (latest deadline + ``grace_s`` when never recorded): read what is stored; resolve
  from it or fail with :class:`RolloutTimeoutError` saying that no result was stored.

Checks are batched (one BatchGetItem per 100 due futures), reads are paced to ``reads_per_s``, and a future's
result is read at most once. A future resolved by its event before its first check costs nothing: the happy
path makes no call here.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from rollout_contract import ResultKey
from rollout_contract.resources import SESSIONS_PARTITION_KEY
from rollout_contract.sessions import ATTR_DEADLINE_AT, ATTR_INPUT_ID, ATTR_STATE, ATTR_STATUS, SessionState
from trainer_client._exceptions import RolloutError, RolloutTimeoutError
from trainer_client._future import RolloutFuture
from trainer_client._results import ClientResult

if TYPE_CHECKING:
    from types_boto3_dynamodb import DynamoDBClient

__all__ = ["DeadlineWatch"]

logger = logging.getLogger("trainer_client")

#: BatchGetItem reads at most 100 keys.
_BATCH = 100
_STARTED = frozenset({SessionState.RUNNING.value})
#: Pause before a check that could not be made (an AWS error) is made again.
_RETRY_S = 30.0

ReadStored = Callable[[str], "ClientResult | None"]


@dataclass
class _Watched:
    future: RolloutFuture
    #: Seconds the rollout may run once started (``None``: unknown, e.g. attached by key).
    timeout_s: float | None
    #: Unix time by which it has ended at the latest (started at its start limit, ran its timeout).
    latest_deadline: float


class DeadlineWatch:
    """Checks pending futures past their deadline against the sessions table and the results bucket.

    Args:
        dynamodb: a boto3 DynamoDB client.
        table: the experiment's sessions table.
        exp_id: the experiment (to name result keys of futures attached by session id).
        read_stored: reads the stored result at a key (``None``: none stored).
        settle: resolves (result) or fails (exception) a future unless it is done.
        grace_s: how long after a deadline a result (the agent's, or the sweeper's ``timed_out``) may still come.
        reads_per_s: stored results read per second at most.
        clock: Unix time.
    """

    def __init__(
        self,
        dynamodb: DynamoDBClient,
        table: str,
        *,
        exp_id: str,
        read_stored: ReadStored,
        settle: Callable[[RolloutFuture, ClientResult | BaseException], None],
        grace_s: float,
        reads_per_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._dynamodb = dynamodb
        self._table = table
        self._exp_id = exp_id
        self._read_stored = read_stored
        self._settle = settle
        self._grace_s = grace_s
        self._read_gap_s = 1 / reads_per_s
        self._clock = clock
        self._heap: list[tuple[float, int, _Watched]] = []
        self._order = itertools.count()
        self._cond = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None
        #: AWS calls this watch made (tests and benchmarks count them).
        self.calls = 0

    def watch(self, future: RolloutFuture, *, timeout_s: float | None, submitted_at: float, latest: float) -> None:
        """Check ``future`` if it is still pending when its rollout could have ended (+ grace)."""
        first = submitted_at + (timeout_s or 0.0) + self._grace_s
        self._push(min(first, latest + self._grace_s), _Watched(future, timeout_s, latest))

    def close(self) -> None:
        """Stop checking (the futures are failed by the poller's close)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(10)

    def _push(self, at: float, watched: _Watched) -> None:
        with self._cond:
            if self._closed:
                return
            heapq.heappush(self._heap, (at, next(self._order), watched))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="rollouts-deadlines", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            due = self._take_due()
            if due is None:
                return
            try:
                self._check(due)
            except Exception:  # noqa: BLE001 - the watch must outlive any one failed check
                logger.exception("deadline check failed; retrying in %.0f s", _RETRY_S)
                for watched in due:
                    self._push(self._clock() + _RETRY_S, watched)

    def _take_due(self) -> list[_Watched] | None:
        """Wait for the next due futures (at most a batch); ``None`` once closed."""
        with self._cond:
            while True:
                if self._closed:
                    return None
                while self._heap and self._heap[0][2].future.done():
                    heapq.heappop(self._heap)
                now = self._clock()
                if self._heap and self._heap[0][0] <= now:
                    due: list[_Watched] = []
                    while self._heap and self._heap[0][0] <= now and len(due) < _BATCH:
                        watched = heapq.heappop(self._heap)[2]
                        if not watched.future.done():
                            due.append(watched)
                    if due:
                        return due
                    continue
                self._cond.wait(self._heap[0][0] - now if self._heap else None)

    def _check(self, due: list[_Watched]) -> None:
        items = self._items([w.future.session_id for w in due])
        now = self._clock()
        for watched in due:
            item = items.get(watched.future.session_id)
            step = self._next_step(watched, item, now)
            if isinstance(step, float):
                self._push(step, watched)
            else:
                self._read(watched, item, why=step)

    def _next_step(self, watched: _Watched, item: Mapping[str, Any] | None, now: float) -> float | str:
        """When to check again (Unix time), or why to read the stored result now."""
        if item is None or ATTR_STATE not in item:
            if now >= watched.latest_deadline + self._grace_s:
                return "never recorded by a dispatcher (is the dispatcher running? `rollouts doctor`)"
            return min(watched.latest_deadline, now + (watched.timeout_s or self._grace_s)) + self._grace_s
        state = item[ATTR_STATE]["S"]
        if state == SessionState.FINISHED.value:
            return f"ended ({item.get(ATTR_STATUS, {}).get('S', '?')})"
        deadline = float(item[ATTR_DEADLINE_AT]["N"]) if ATTR_DEADLINE_AT in item else watched.latest_deadline
        if now >= deadline + self._grace_s:
            return (
                f"{state} {now - deadline:.0f} s after its deadline, though the sweeper ends overdue rollouts as "
                "timed_out every minute (is it running? `rollouts doctor`)"
            )
        if state in _STARTED:
            return deadline + self._grace_s
        return min(deadline, now + (watched.timeout_s or self._grace_s)) + self._grace_s

    def _read(self, watched: _Watched, item: Mapping[str, Any] | None, *, why: str) -> None:
        future = watched.future
        key = future.result_key or self._key(future.session_id, item)
        if key is None:
            self._settle(future, self._timeout(future, why, "its input id is unknown"))
            return
        time.sleep(self._read_gap_s)
        self.calls += 1
        try:
            result = self._read_stored(key)
        except RolloutError as exc:
            logger.warning("could not read the stored result of %s (%s); retrying in %.0f s", key, exc, _RETRY_S)
            self._push(self._clock() + _RETRY_S, watched)
            return
        if result is None:
            self._settle(future, self._timeout(future, why, "no result is stored"))
            return
        logger.warning(
            "rollout %s: no result event arrived (%s); resolved from the stored result %s", future.session_id, why, key
        )
        self._settle(future, result)

    def _timeout(self, future: RolloutFuture, why: str, found: str) -> RolloutTimeoutError:
        return RolloutTimeoutError(
            f"rollout {future.session_id}: no result event arrived and {found}; its record: {why}"
        )

    def _key(self, session_id: str, item: Mapping[str, Any] | None) -> str | None:
        if item is None or ATTR_INPUT_ID not in item:
            return None
        return str(ResultKey(self._exp_id, item[ATTR_INPUT_ID]["S"], session_id))

    def _items(self, session_ids: list[str]) -> dict[str, Mapping[str, Any]]:
        """The sessions items of ``session_ids`` (one BatchGetItem; unprocessed keys read again)."""
        found: dict[str, Mapping[str, Any]] = {}
        request: dict[str, Any] = {
            self._table: {
                "Keys": [{SESSIONS_PARTITION_KEY: {"S": sid}} for sid in session_ids],
                "ConsistentRead": True,
                "ProjectionExpression": "#id, #state, #status, #deadline, #input",
                "ExpressionAttributeNames": {
                    "#id": SESSIONS_PARTITION_KEY,
                    "#state": ATTR_STATE,
                    "#status": ATTR_STATUS,
                    "#deadline": ATTR_DEADLINE_AT,
                    "#input": ATTR_INPUT_ID,
                },
            }
        }
        for attempt in itertools.count():
            self.calls += 1
            try:
                response = self._dynamodb.batch_get_item(RequestItems=request)
            except (BotoCoreError, ClientError):
                if attempt >= 2:
                    raise
                time.sleep(0.5 * (attempt + 1))
                continue
            for item in response.get("Responses", {}).get(self._table, []):
                found[item[SESSIONS_PARTITION_KEY]["S"]] = item
            request = response.get("UnprocessedKeys") or {}
            if not request:
                return found
            time.sleep(0.1 * (attempt + 1))
        return found  # pragma: no cover - the loop returns or raises
