"""The dispatcher's budgets on the real local stack: a full session budget waits, emulator throttling retries."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from e2e_support import connect, emulator_counters, scripted_stack, serving

from local_stack.stack import LocalStack
from rollout_contract import Status

pytestmark = pytest.mark.e2e

EXP = "e2e-budgets"
SESSION_BUDGET = 2


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """A stack whose dispatchers may hold 2 sessions and whose runtime accepts 1 invoke (or stop) per second."""
    stack = scripted_stack(
        tmp_path_factory.mktemp("budgets"), EXP, session_budget=SESSION_BUDGET, runtime_options={"invoke_tps": 1}
    )
    with serving(stack) as running:
        yield running


def test_a_full_session_budget_makes_rollouts_wait_then_run_and_throttling_is_retried(stack: LocalStack) -> None:
    # GIVEN a session budget of 2 and a runtime that throttles above 1 call per second
    # WHEN six 1-second rollouts are submitted at once
    with connect(stack, EXP) as client:
        futures = client.submit([({"action": "succeed", "sleep_s": 1.0}, f"budget-{i}") for i in range(6)], timeout=90)
        results = [future.result(timeout=120) for future in futures]
    # THEN all six succeed, never more than two ran at the same time, and the runtime's 429s were retried
    assert [r.status for r in results] == [Status.SUCCEEDED] * 6
    spans = sorted((r.user_fields["ran_from"], r.user_fields["ran_to"]) for r in results)
    most_at_once = max(sum(1 for start, end in spans if start <= moment < end) for moment, _ in spans)
    assert most_at_once <= SESSION_BUDGET
    counters = emulator_counters(stack)
    assert counters["throttles"] >= 1
    assert counters["starts"] == 6


def test_a_backlog_longer_than_the_timeout_drains_and_a_dead_agent_times_out_at_its_deadline(
    stack: LocalStack,
) -> None:
    # GIVEN 2 session slots and 1 runtime call per second: 8 rollouts need at least 16 s (an invoke and a
    # stop each), four times their 4 s timeout; the last one's agent dies without a result
    timeout_s = 4.0
    items = [({"action": "succeed", "sleep_s": 0.2}, f"backlog-{i}") for i in range(7)]
    items.append(({"action": "crash"}, "backlog-dies"))
    # WHEN they are submitted at once
    with connect(stack, EXP) as client:
        futures = client.submit(items, timeout=timeout_s)
        results = [future.result(timeout=240) for future in futures]
    # THEN the backlog outlasted the timeout, yet every timeout ran from its rollout's start: the seven live
    # agents succeed, and the dead one ends timed_out soon after its own deadline (the sweeper runs every second)
    first_submit = min(r.timings.submitted_at for r in results if r.timings.submitted_at is not None)
    last_start = max(r.timings.dispatched_at for r in results if r.timings.dispatched_at is not None)
    assert last_start - first_submit > timeout_s
    assert [r.status for r in results[:7]] == [Status.SUCCEEDED] * 7
    dead = results[7]
    assert dead.status is Status.TIMED_OUT
    assert dead.timings.dispatched_at is not None and dead.timings.finished_at is not None
    assert 0 <= dead.timings.finished_at - (dead.timings.dispatched_at + timeout_s) < 15
