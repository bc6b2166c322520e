"""The invoke budget of one runtime endpoint, shared by every dispatcher, finisher and sweeper.

Reserved slots instead of per-second counters: one DynamoDB item holds ``next_at``, the start time of
the next free slot. Taking tokens is one atomic update that hands out a run of slots and moves ``next_at``
past them; each caller sleeps until its slot starts. A send may come up to :attr:`TpsBudget.max_lateness_s`
(40 ms) after its slot (a busy host wakes late), so slots are spaced ``(1 + max_lateness_s) / (floor(limit)
x TPS_HEADROOM)`` apart: the sends of any 1-second window come from slots within ``1 + max_lateness_s``,
which hold fewer than ``floor(limit)``. Calendar-second counters would admit twice the limit across a
boundary.

A caller that finds the budget idle (``next_at`` in the past) sends at once, and the reserving update's round
trip on a busy host must not make it miss its slot: the first slot of an idle run may be sent any time
within :data:`IDLE_WINDOW_S` and the run's later slots start after that window. The window costs capacity
only while the budget is idle; under a backlog ``next_at`` is ahead and every slot is a plain one.

One process asks for slots one update at a time: the update takes as many slots as the process has
callers waiting (up to :data:`MAX_RUN` and within the horizon), and the callers queued behind it take
theirs from that run without a call. A slot missed by more than the lateness (a stalled caller) is given
up; the caller takes the next slot its process holds, and reserves only when it holds none.

An update guesses the budget's state as the process last saw it: busy (take the run at ``next_at``) or idle
(``next_at`` in the past: start at "now"). A budget seen busy, whose ``next_at`` has passed since, is still
guessed busy for :data:`BUSY_MEMORY_S` (under a backlog the other processes have moved it on meanwhile),
idle after that. A failed update returns the item it met, so guessing wrong costs one more update and
never a read.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rollout_budgets.conditional import conditional_write, n
from rollout_budgets.errors import NoTokenError
from rollout_contract.budgets import ATTR_NEXT_AT, tps_budget_id
from rollout_contract.resources import BUDGET_PARTITION_KEY, TTL_ATTRIBUTE

if TYPE_CHECKING:
    from types_boto3_dynamodb import DynamoDBClient

#: Fraction of the limit the slots are spaced for, on top of the lateness: clocks and networks jitter.
TPS_HEADROOM = 0.99
#: How late a send may come after its slot's start (a busy host's late wake-up) and still use the slot.
MAX_LATENESS_S = 0.04
#: How far ahead of "now" a slot starts at the earliest.
LEAD_S = 0.01
#: How late the first slot of a run taken from an idle budget may be sent: the reserving update's round trip
#: on a busy host.
IDLE_WINDOW_S = 0.1
#: Most slots one update takes for the callers of one process.
MAX_RUN = 10
#: How long a budget seen busy is guessed busy still: a process that reserves now and then (a finisher
#: environment under a backlog) would otherwise guess idle, and fail, on most of its updates.
BUSY_MEMORY_S = 2.0
#: How long a budget item outlives its last use (TTL), in seconds.
ITEM_TTL_S = 24 * 3600
_FORGET_WINDOW_S = 60.0
#: Slot times are sums of floats: a horizon is met to within this.
_ROUNDING_S = 1e-6
_MAX_ROUNDS = 8


class TpsBudget:
    """Invoke slots of one runtime endpoint (ARN + qualifier), at most ``limit`` per sliding second."""

    def __init__(
        self,
        dynamodb: DynamoDBClient,
        *,
        table: str,
        runtime_arn: str,
        qualifier: str,
        limit: float,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        lead_s: float = LEAD_S,
        max_lateness_s: float = MAX_LATENESS_S,
    ) -> None:
        if limit <= 0:
            raise ValueError(f"TPS limit must be positive, got {limit}")
        self._dynamodb = dynamodb
        self._table = table
        self._key = {BUDGET_PARTITION_KEY: {"S": tps_budget_id(runtime_arn, qualifier)}}
        self._clock = clock
        self._sleep = sleep
        self.lead_s = lead_s
        if limit >= 1:
            self.max_lateness_s = max_lateness_s
            self.interval_s = (1.0 + max_lateness_s) / (math.floor(limit) * TPS_HEADROOM)
        else:  # one send per window at most: a late send still leaves half an interval to the next
            self.interval_s = 1.0 / (limit * TPS_HEADROOM)
            self.max_lateness_s = self.interval_s / 2
        #: ``next_at`` as the last update saw it (``-inf``: unset); ``None`` before the first update. It never
        #: moves back, so a slot seen beyond the horizon is known to be out of reach without a call.
        self._seen_next_at: float | None = None
        #: When ``next_at`` was last seen, and whether it was ahead of that moment (others had reserved ahead).
        self._seen_at = -math.inf
        self._seen_busy = False
        #: Slots this process reserved and has not handed out yet, earliest first.
        self._held: list[float] = []
        #: The latest send time of the idle runs' first slots handed out and not yet waited for, by start.
        self._windows: dict[float, float] = {}
        #: Callers of :meth:`reserve` in this process right now (the size of the next run).
        self._callers = 0
        #: Slots the batch this process is handling may still ask for (see :meth:`expecting`).
        self._expected = 0
        self._state = threading.Lock()
        #: One update at a time per process: the callers queued behind it take slots from its run.
        self._reserving = threading.Lock()
        #: Held by the one thread of this process that waits for a slot; the others queue behind it, so a
        #: batch's threads do not all wake at the same moment and each spend an update on the same slot.
        self._waiting = threading.Lock()

    @property
    def next_free_seen(self) -> float:
        """The earliest slot this process could hand out: the first it holds, else the budget's next free one as
        last seen (``-inf``: not seen yet)."""
        with self._state:
            if self._held:
                return self._held[0]
        seen = self._seen_next_at
        return -math.inf if seen is None else seen

    @property
    def callers(self) -> int:
        """Callers of :meth:`reserve` in this process now: the size of the next run an update takes."""
        with self._state:
            return self._callers

    @contextmanager
    def expecting(self, count: int) -> Iterator[None]:
        """While handling a batch of ``count`` records, take runs for the slots its records have yet to ask for.

        A batch's records reach their reservations a few milliseconds apart (each after its own writes), so
        runs sized by the callers waiting at that moment would be short. A record that needs no slot leaves
        its slot unused (capacity lost, never an extra send); one process handles one batch at a time.
        """
        with self._state:
            self._expected = count
        try:
            yield
        finally:
            with self._state:
                self._expected = 0

    def expect_fewer(self, count: int = 1) -> None:
        """``count`` records of the batch being handled will not ask for a slot soon (they wait for a session slot
        or go back to their queue): runs are no longer sized for them, and they reserve as callers if they do."""
        with self._state:
            self._expected = max(0, self._expected - count)

    def reserve(self, *, horizon_s: float, whole_run: bool = False) -> float:
        """Reserve the next free slot if it starts within ``horizon_s`` seconds; return its start time.

        Args:
            horizon_s: how far ahead the slot may start.
            whole_run: while the budget is busy, take slots only once the run this process wants fits
                within the horizon (:meth:`reserve_waiting` sleeps until then), not a shorter one sooner.

        Raises:
            NoTokenError: every slot up to the horizon is taken (``retry_after_s`` says for how long).
        """
        with self._state:
            self._callers += 1
        try:
            with self._reserving:
                return self._reserve(horizon_s, whole_run=whole_run)
        finally:
            with self._state:
                self._callers -= 1

    def _reserve(self, horizon_s: float, *, whole_run: bool) -> float:
        for _ in range(_MAX_ROUNDS):
            now = self._clock()
            earliest = now + self.lead_s
            horizon = max(now + horizon_s, earliest)
            held = self._take_held(now, horizon)
            if held is not None:
                return held
            seen = self._seen_next_at
            if seen is not None and (seen > horizon or (whole_run and seen >= earliest)):
                wait = self._until_run_fits(seen, horizon, horizon_s)
                if wait > _ROUNDING_S:
                    raise NoTokenError(retry_after_s=wait)
            # Idle when last seen: try a run from "now" first (a busy budget goes straight to ``next_at``).
            if (
                seen is not None
                and seen < earliest
                and self._guess_idle(now)
                and self._take_idle_run(earliest, horizon)
            ):
                return self._hand_out()
            next_at = self._take_queued_run(earliest, horizon)
            if next_at is None:
                return self._hand_out()
            if next_at > horizon:
                raise NoTokenError(retry_after_s=self._until_run_fits(next_at, horizon, horizon_s))
            if next_at < earliest and self._take_idle_run(earliest, horizon):
                return self._hand_out()
        raise NoTokenError(retry_after_s=self.interval_s)

    def reserve_waiting(self, *, horizon_s: float, wait_s: float) -> float:
        """Like :meth:`reserve`, but while every slot up to the horizon is taken, sleep until one is in reach.

        Each reservation still starts at most ``horizon_s`` ahead of its own "now", so callers with a longer
        horizon keep their precedence; waiting here instead of going back to the queue keeps the budget full
        under a backlog (a requeue costs at least a second of SQS visibility and several writes).

        Raises:
            NoTokenError: no slot came within reach in ``wait_s`` seconds.
        """
        give_up_at = self._clock() + wait_s
        try:
            return self.reserve(horizon_s=horizon_s, whole_run=True)
        except NoTokenError as exc:
            if self._clock() + exc.retry_after_s > give_up_at:
                raise
        if not self._waiting.acquire(timeout=max(0.0, give_up_at - self._clock())):
            raise NoTokenError(retry_after_s=self.interval_s)
        try:
            while True:
                try:
                    return self.reserve(horizon_s=horizon_s, whole_run=True)
                except NoTokenError as exc:
                    if self._clock() + exc.retry_after_s > give_up_at:
                        raise
                    self._sleep(exc.retry_after_s)
        finally:
            self._waiting.release()

    def wait_for(self, slot_start: float, *, max_wait_s: float, wait_s: float = 0.0) -> float:
        """Sleep until a reserved slot starts and return the send time.

        A slot missed by more than :attr:`max_lateness_s` (a stalled caller) is given up for a new one,
        so a late send never crowds the window of a later slot; the new one is reserved as
        :meth:`reserve_waiting` does (``wait_s``: how long it may wait for a slot within ``max_wait_s``).

        Raises:
            NoTokenError: a new slot was needed and none came within reach in time.
        """
        start = slot_start
        while True:
            delay = start - self._clock()
            if delay > 0:
                self._sleep(delay)
            now = self._clock()
            with self._state:
                latest = self._windows.pop(start, start + self.max_lateness_s)
            if now <= latest:
                return now
            start = self.reserve_waiting(horizon_s=max_wait_s, wait_s=wait_s)

    def acquire(self, *, max_wait_s: float) -> float:
        """Wait for a slot starting within ``max_wait_s`` seconds; return the send time.

        Raises:
            NoTokenError: no slot starts within ``max_wait_s``.
        """
        return self.wait_for(self.reserve(horizon_s=max_wait_s), max_wait_s=max_wait_s)

    def _run_length(self, first: float, horizon: float) -> int:
        """Slots to take in a run from ``first``: one per caller waiting now, as many as start within ``horizon``."""
        with self._state:
            wanted = min(MAX_RUN, max(self._callers, self._expected))
        return max(1, min(wanted, math.floor((horizon + _ROUNDING_S - first) / self.interval_s) + 1))

    def _until_run_fits(self, next_at: float, horizon: float, horizon_s: float) -> float:
        """Seconds until the run this process wants fits within its horizon, the run at most half a horizon long.

        A waiter that woke as soon as one slot came within reach would take runs of one under a backlog (the
        horizon slides one slot at a time); waiting a little longer takes the same slots in one update.
        """
        with self._state:
            wanted = min(MAX_RUN, max(self._callers, self._expected))
        run = max(1, min(wanted, math.floor(horizon_s / 2 / self.interval_s) + 1))
        return next_at + (run - 1) * self.interval_s - horizon

    @property
    def _idle_shift_s(self) -> float:
        """How much later than a plain run an idle run's second slot starts (its first slot's longer window)."""
        return max(0.0, IDLE_WINDOW_S - self.max_lateness_s)

    def _take_queued_run(self, earliest: float, horizon: float) -> float | None:
        """Take a run of slots from ``next_at`` when it lies in ``[earliest, horizon]``, the run within the horizon.

        Returns:
            ``None`` when taken (the run is held), else ``next_at`` as the update saw it (``-inf``: unset).
        """
        seen = self._seen_next_at
        count = self._run_length(seen if seen is not None and seen >= earliest else earliest, horizon)
        written = conditional_write(
            self._dynamodb.update_item,
            TableName=self._table,
            Key=self._key,
            UpdateExpression="SET #next = #next + :step, #ttl = :ttl",
            ConditionExpression="#next BETWEEN :earliest AND :last_first",
            ExpressionAttributeNames={"#next": ATTR_NEXT_AT, "#ttl": TTL_ATTRIBUTE},
            ExpressionAttributeValues={
                ":step": n(count * self.interval_s),
                ":earliest": n(earliest),
                ":last_first": n(horizon - (count - 1) * self.interval_s + _ROUNDING_S),
                ":ttl": n(int(earliest) + ITEM_TTL_S),
            },
            ReturnValues="UPDATED_NEW",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        if not written.ok:
            return self._remember(written.response.get("Item"))
        next_at = self._remember(written.response["Attributes"])
        self._hold([next_at - (count - index) * self.interval_s for index in range(count)])
        return None

    def _take_idle_run(self, earliest: float, horizon: float) -> bool:
        """Take a run of slots from ``earliest`` when the budget is idle (``next_at`` before it, or unset)."""
        # The first slot is sent any time up to IDLE_WINDOW_S after ``earliest``: as if it started at
        # ``earliest + shift`` with the usual lateness, sent early, which the idle budget allows (no slot
        # after ``earliest - interval``), so the run's later slots follow that virtual start.
        shift = self._idle_shift_s
        count = self._run_length(earliest + shift, horizon)
        written = conditional_write(
            self._dynamodb.update_item,
            TableName=self._table,
            Key=self._key,
            UpdateExpression="SET #next = :next, #ttl = :ttl",
            ConditionExpression="attribute_not_exists(#next) OR #next < :earliest",
            ExpressionAttributeNames={"#next": ATTR_NEXT_AT, "#ttl": TTL_ATTRIBUTE},
            ExpressionAttributeValues={
                ":next": n(earliest + shift + count * self.interval_s),
                ":earliest": n(earliest),
                ":ttl": n(int(earliest) + ITEM_TTL_S),
            },
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        if not written.ok:
            self._remember(written.response.get("Item"))
            return False
        self._seen_next_at = earliest + shift + count * self.interval_s
        self._seen_at, self._seen_busy = earliest, False
        self._hold([earliest, *(earliest + shift + index * self.interval_s for index in range(1, count))])
        with self._state:
            self._windows[earliest] = earliest + shift + self.max_lateness_s
        return True

    def _hold(self, run: list[float]) -> None:
        with self._state:
            for start in run:
                bisect.insort(self._held, start)

    def _hand_out(self) -> float:
        """The earliest held slot (a run was just taken, so there is one)."""
        with self._state:
            self._expected = max(0, self._expected - 1)
            return self._held.pop(0)

    def _take_held(self, now: float, horizon: float) -> float | None:
        """The earliest held slot still usable (half the lateness left) and within the horizon, if any."""
        with self._state:
            margin = self.max_lateness_s / 2
            while self._held and self._windows.get(self._held[0], self._held[0] + self.max_lateness_s) - margin < now:
                self._windows.pop(self._held.pop(0), None)  # expired unused: lost capacity, never an extra send
            for start in [start for start, latest in self._windows.items() if latest < now - _FORGET_WINDOW_S]:
                del self._windows[start]  # handed out but never waited for (the caller gave up before its send)
            if self._held and self._held[0] <= horizon:
                self._expected = max(0, self._expected - 1)
                return self._held.pop(0)
        return None

    def _remember(self, item: dict[str, dict[str, str]] | None) -> float:
        """Keep and return the ``next_at`` of an item an update returned (``-inf`` when it had none)."""
        next_at = float(item[ATTR_NEXT_AT]["N"]) if item and ATTR_NEXT_AT in item else -math.inf
        self._seen_next_at = next_at
        self._seen_at = self._clock()
        self._seen_busy = next_at > self._seen_at
        return next_at

    def _guess_idle(self, now: float) -> bool:
        """Whether a budget whose ``next_at`` has passed is idle: it was idle when seen, or that was long ago."""
        return not self._seen_busy or now - self._seen_at > BUSY_MEMORY_S
