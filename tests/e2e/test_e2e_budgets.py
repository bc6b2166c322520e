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
