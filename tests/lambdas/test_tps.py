"""The TPS budget: reserved slots in DynamoDB never exceed the limit in any sliding second."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import boto3
import pytest

from rollout_budgets.errors import NoTokenError
from rollout_budgets.tps import IDLE_WINDOW_S, TPS_HEADROOM, TpsBudget
from rollout_contract.resources import BUDGET_TABLE
from tests.lambdas.conftest import RUNTIME_ARN, CallCounter


class Serialized:
    """A client whose calls run one at a time, as DynamoDB applies conditional writes to one item.

    moto evaluates a condition and writes without a lock, so two threads can both pass the same
    condition; real DynamoDB cannot. The lock gives moto DynamoDB's atomicity, nothing more.
    """

    def __init__(self, client) -> None:
        self._client = client
        self._lock = threading.Lock()

    def __getattr__(self, name: str):
        method = getattr(self._client, name)

        def call(*args, **kwargs):
            with self._lock:
                return method(*args, **kwargs)

        return call


class FakeClock:
    """A clock that moves only when told to (sleeping moves it)."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def at(moment: float) -> Any:
    """``moment`` to the microsecond (``pytest.approx``'s default relative tolerance is a second at 10**6)."""
    return pytest.approx(moment, rel=0, abs=1e-6)


@pytest.fixture
def dynamodb(aws: None, boto_session: boto3.Session):
    client = boto_session.client("dynamodb")
    client.create_table(**BUDGET_TABLE.create_table_request())
    return client


def budget(dynamodb, clock=time.time, sleep=time.sleep, *, limit: float = 25, qualifier: str = "DEFAULT") -> TpsBudget:
    return TpsBudget(
        dynamodb,
        table=BUDGET_TABLE.name,
        runtime_arn=RUNTIME_ARN,
        qualifier=qualifier,
        limit=limit,
        clock=clock,
        sleep=sleep,
    )


def max_in_any_second(times: list[float]) -> int:
    times = sorted(times)
    best, left = 0, 0
    for right, t in enumerate(times):
        while t - times[left] >= 1.0:
            left += 1
        best = max(best, right - left + 1)
    return best


def run_together(target, count: int) -> None:
    """Run ``target`` on ``count`` threads at once and wait for all."""
    threads = [threading.Thread(target=target) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def test_back_to_back_reservations_are_spaced_to_stay_under_the_limit(dynamodb) -> None:
    # GIVEN a 25/s budget and a caller asking for many slots at one instant
    clock = FakeClock()
    tps = budget(dynamodb, clock, clock.sleep)

    # WHEN 100 slots are reserved with a long horizon
    starts = [tps.reserve(horizon_s=10) for _ in range(100)]

    # THEN they are spaced (1 + lateness)/(25 x headroom) apart: never more than 25 in a second even when every
    # send comes as late as allowed, and close to 25 overall
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    assert min(gaps) == pytest.approx((1 + tps.max_lateness_s) / (25 * TPS_HEADROOM))
    assert max_in_any_second(starts) <= 25
    assert max_in_any_second([start + tps.max_lateness_s * (index % 2) for index, start in enumerate(starts)]) <= 25
    assert 98 / (starts[-1] - starts[1]) >= 0.94 * 25  # the first slot, from an idle budget, has a longer window


def test_no_slot_within_the_horizon_raises_with_the_wait(dynamodb) -> None:
    # GIVEN a budget reserved 2 s ahead
    clock = FakeClock()
    tps = budget(dynamodb, clock, clock.sleep, limit=10)
    while True:
        try:
            tps.reserve(horizon_s=2)
        except NoTokenError:
            break

    # WHEN another caller asks with a 0.5 s horizon
    with pytest.raises(NoTokenError) as caught:
        tps.reserve(horizon_s=0.5)

    # THEN it is told how long until a slot comes within reach
    assert 1.4 < caught.value.retry_after_s <= 1.6


def test_an_idle_budget_restarts_at_now_without_a_burst_of_old_slots(dynamodb) -> None:
    # GIVEN a budget last used a minute ago
    clock = FakeClock()
    tps = budget(dynamodb, clock, clock.sleep)
    tps.reserve(horizon_s=1)
    clock.now += 60

    # WHEN two slots are reserved
    first, second = tps.reserve(horizon_s=1), tps.reserve(horizon_s=1)

    # THEN the first starts right away (after the lead time) and the second one interval after the first's send
    # window (the first may go out up to IDLE_WINDOW_S late)
    assert first == at(clock.now + tps.lead_s)
    assert second == at(first + IDLE_WINDOW_S - tps.max_lateness_s + tps.interval_s)


def test_a_slot_taken_from_an_idle_budget_survives_a_slow_round_trip_without_a_call(dynamodb) -> None:
    # GIVEN an idle budget, and a caller whose reservation's answer arrives late (a busy host)
    clock = FakeClock()
    tps = budget(dynamodb, clock, clock.sleep)
    start = tps.reserve(horizon_s=1)
    clock.now = start + 0.9 * IDLE_WINDOW_S
    calls = CallCounter().watch(dynamodb)

    # WHEN it waits for its slot, then another caller reserves right away
    sent = tps.wait_for(start, max_wait_s=1)
    after = tps.reserve(horizon_s=1)

    # THEN it sent in its slot with no further update, and the next slot is a full interval after the send
    assert sent == clock.now
    assert calls.take() == {"UpdateItem": 1}
    assert after - sent >= tps.interval_s - tps.max_lateness_s


def test_endpoints_have_separate_budgets(dynamodb) -> None:
    # GIVEN two qualifiers of one runtime
    clock = FakeClock()
    default, canary = budget(dynamodb, clock, qualifier="DEFAULT"), budget(dynamodb, clock, qualifier="canary")

    # WHEN each reserves a slot at the same instant
    # THEN both start right away
    assert default.reserve(horizon_s=1) == canary.reserve(horizon_s=1) == at(clock.now + default.lead_s)


def test_a_slot_missed_by_a_stalled_caller_is_replaced_not_used_late(dynamodb) -> None:
    # GIVEN a reserved slot and a caller that stalls past it
    clock = FakeClock()
    tps = budget(dynamodb, clock, clock.sleep)
    start = tps.reserve(horizon_s=1)
    clock.now = start + 0.5
    stall_end = clock.now

    # WHEN it waits for its slot
    sent = tps.wait_for(start, max_wait_s=1)

    # THEN it sends in a fresh slot reserved after the stall, not in the missed one
    assert sent == clock.now
    assert sent == at(stall_end + tps.lead_s)


def test_a_send_late_within_the_tolerance_keeps_its_slot_without_a_call(dynamodb) -> None:
    # GIVEN a reserved slot and a caller that wakes up late, but within the lateness tolerance
    clock = FakeClock()
    tps = budget(dynamodb, clock, clock.sleep)
    start = tps.reserve(horizon_s=1)
    clock.now = start + 0.75 * tps.max_lateness_s
    calls = CallCounter().watch(dynamodb)

    # WHEN it waits for its slot
    sent = tps.wait_for(start, max_wait_s=1)

    # THEN it sends at once in that slot, with no update
    assert sent == clock.now
    assert calls.take() == {}


class HeldFirstUpdate(Serialized):
    """A serialized client whose first update waits until ``callers`` callers are asking the budget."""

    def __init__(self, client, callers: int) -> None:
        super().__init__(client)
        self.tps: TpsBudget | None = None
        self._callers = callers
        self._first = True

    def update_item(self, **request):
        if self._first:
            self._first = False
            deadline = time.monotonic() + 60
            while self.tps.callers < self._callers and time.monotonic() < deadline:
                time.sleep(0.001)
        return self.__getattr__("update_item")(**request)


def test_callers_of_one_process_share_a_run_of_slots_taken_in_one_update(dynamodb) -> None:
    # GIVEN one process's budget whose first update is still on its way while ten callers ask for slots
    clock = FakeClock()
    client = HeldFirstUpdate(dynamodb, callers=10)
    tps = budget(client, clock, clock.sleep, limit=10)
    client.tps = tps
    calls = CallCounter().watch(dynamodb)
    starts: list[float] = []
    lock = threading.Lock()

    def caller() -> None:
        start = tps.reserve(horizon_s=2)
        with lock:
            starts.append(start)

    # WHEN they reserve together
    run_together(caller, 10)

    # THEN each got its own slot, spaced by at least the interval (the first slot, from an idle budget, has a
    # longer window), from at most two updates (the first update's run, then one for every caller queued behind)
    gaps = [later - earlier for earlier, later in itertools.pairwise(sorted(starts))]
    assert len(gaps) == 9
    assert gaps[0] >= tps.interval_s
    assert gaps[1:] == pytest.approx([tps.interval_s] * 8)
    assert calls.take()["UpdateItem"] <= 2


def test_the_records_of_a_batch_share_one_run_taken_for_the_batch(dynamodb) -> None:
    # GIVEN a budget used before, idle now, and a batch of five records being handled
    clock = FakeClock()
    tps = budget(dynamodb, clock, clock.sleep, limit=10)
    tps.reserve(horizon_s=1)
    clock.now += 60
    calls = CallCounter().watch(dynamodb)

    # WHEN the records reserve one after another (each after its own writes), then once more after the batch
    with tps.expecting(5):
        starts = []
        for _ in range(5):
            starts.append(tps.reserve(horizon_s=1))
            clock.now += 0.01
    after = tps.reserve(horizon_s=1)

    # THEN one update took the batch's five slots, spaced as usual, and the next reservation took one more
    assert calls.take() == {"UpdateItem": 2}
    assert len(set(starts)) == 5 and after > starts[-1]
    assert [later - earlier for earlier, later in itertools.pairwise(starts[1:])] == pytest.approx([tps.interval_s] * 3)


def test_a_batch_waiting_for_a_busy_budget_wakes_when_its_run_fits_and_takes_it_in_one_update(dynamodb) -> None:
    # GIVEN a budget another process reserved 2 s ahead, and a batch of four records here, each with a 1 s horizon
    clock = FakeClock()
    other, tps = budget(dynamodb, clock, clock.sleep, limit=10), budget(dynamodb, clock, clock.sleep, limit=10)
    with pytest.raises(NoTokenError):
        while True:
            other.reserve(horizon_s=2)
    calls = CallCounter().watch(dynamodb)

    # WHEN the records reserve, waiting for slots in reach
    with tps.expecting(4):
        starts = [tps.reserve_waiting(horizon_s=1, wait_s=5) for _ in range(4)]

    # THEN one update learned where the budget was, and after the wait one update took all four slots
    assert calls.take() == {"UpdateItem": 2}
    assert [later - earlier for earlier, later in itertools.pairwise(starts)] == pytest.approx([tps.interval_s] * 3)
    assert starts[-1] <= clock.now + 1


def test_concurrent_callers_share_one_budget_without_exceeding_it(dynamodb) -> None:
    # GIVEN 8 threads taking tokens from one 20/s budget on the real clock
    sends: list[float] = []
    lock = threading.Lock()

    atomic = Serialized(dynamodb)

    def worker() -> None:
        tps = budget(atomic, limit=20)
        for _ in range(5):
            sent = tps.acquire(max_wait_s=5)
            with lock:
                sends.append(sent)

    # WHEN they run together
    run_together(worker, 8)

    # THEN every send happened and no second held more than the limit
    assert len(sends) == 40
    assert max_in_any_second(sends) <= 20


def test_a_token_costs_one_update_when_the_budget_is_as_last_seen(dynamodb) -> None:
    # GIVEN a caller that has taken a token before
    clock = FakeClock()
    tps = budget(dynamodb, clock, clock.sleep)
    tps.reserve(horizon_s=10)
    calls = CallCounter().watch(dynamodb)

    # WHEN it takes tokens back to back (busy), then after a pause (idle)
    busy = [tps.reserve(horizon_s=10) for _ in range(20)]
    busy_calls = calls.take()
    clock.now += 60
    idle = tps.reserve(horizon_s=10)

    # THEN every token cost one update and nothing was read
    assert busy_calls == {"UpdateItem": 20}
    assert calls.take() == {"UpdateItem": 1}
    assert max_in_any_second(busy) <= 25
    assert idle == at(clock.now + tps.lead_s)


def test_a_caller_that_saw_the_budget_idle_pays_one_more_update_when_it_got_busy(dynamodb) -> None:
    # GIVEN caller B that last saw the budget idle, and caller A that has since reserved the next second
    clock = FakeClock()
    a, b = budget(dynamodb, clock, clock.sleep), budget(dynamodb, clock, clock.sleep)
    b.reserve(horizon_s=1)
    clock.now += 60
    taken_by_a = [a.reserve(horizon_s=2) for _ in range(25)]
    calls = CallCounter().watch(dynamodb)

    # WHEN B takes a token
    start = b.reserve(horizon_s=2)

    # THEN its guess failed and the update told it where the next slot is: two updates, no read
    assert calls.take() == {"UpdateItem": 2}
    assert start == at(taken_by_a[-1] + a.interval_s)
    assert max_in_any_second([*taken_by_a, start]) <= 25


def test_a_caller_that_saw_the_budget_busy_a_moment_ago_guesses_it_busy_still(dynamodb) -> None:
    # GIVEN caller B that saw the budget busy a second ago, and caller A that has kept it busy since
    clock = FakeClock()
    a, b = budget(dynamodb, clock, clock.sleep), budget(dynamodb, clock, clock.sleep)
    a.reserve(horizon_s=2)
    b.reserve(horizon_s=2)
    clock.now += 1.0
    taken_by_a = [a.reserve(horizon_s=2) for _ in range(10)]
    calls = CallCounter().watch(dynamodb)

    # WHEN B takes a token (the next slot it saw has passed)
    start = b.reserve(horizon_s=2)

    # THEN it guessed busy, rightly: one update took the slot after A's
    assert calls.take() == {"UpdateItem": 1}
    assert start == at(taken_by_a[-1] + a.interval_s)
