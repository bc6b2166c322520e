"""The sweeper against moto and the ACR double: deadlines, races with the agent, slot reconciliation."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from lambdas import finisher, sweeper
from lambdas.dispatcher import DispatchOutcome, dispatch
from lambdas.runtime import Runtime, current_runtime
from lambdas.sweeper import SWEEP_WORKERS, TIME_MARGIN_S, sweep
from rollout_budgets.ledger import STALE_EXPERIMENT_S, Transition
from rollout_contract.budgets import SESSION_BUDGET_ID, held_attribute, seen_attribute
from rollout_contract.messages import DispatchRequest
from rollout_contract.metrics import OVERDUE_GRACE_S
from rollout_contract.proof import Provenance
from rollout_contract.protocol import THROTTLING
from rollout_contract.resources import BUDGET_PARTITION_KEY
from rollout_contract.results import Status
from rollout_contract.sessions import SessionState
from tests.lambdas.conftest import STOP, Env, sqs_event, stored_provenance
from tests.lambdas.test_finisher import agent_writes_result, art_agent_writes_result, emf_blobs

#: Rollouts a mass failure leaves overdue at once in these tests: more than the sweeper's workers, so some
#: workers take a second and a third.
MASS_FAILURE = 2 * SWEEP_WORKERS + 5


def later(env: Env, seconds: float):
    """The same runtime with its clock ``seconds`` ahead."""
    return dataclasses.replace(env.rt, clock=lambda: time.time() + seconds)


def running_since(env: Env, seconds_ago: float, *, timeout_s: float) -> DispatchRequest:
    """A rollout submitted and started ``seconds_ago``, with ``timeout_s``."""
    started = time.time() - seconds_ago
    request = env.start_request(timeout_s=timeout_s, submitted_at=started)
    outcome = dispatch(request, receive_count=1, rt=dataclasses.replace(env.rt, clock=lambda: started))
    assert outcome is DispatchOutcome.INVOKED
    return request


def with_settings(env: Env, **changes: Any) -> Env:
    """The same experiment (same clients, tables and budget items) with other settings, e.g. a larger session budget."""
    return dataclasses.replace(env, rt=Runtime.build(env.rt.settings.model_copy(update=changes), env.rt.clients))


def one_call_at_a_time(dynamodb: Any) -> None:
    """Run the client's calls one at a time, as DynamoDB applies conditional writes to one item.

    moto checks a condition and writes without a lock, so parallel workers could both pass the same condition
    on the budget item; real DynamoDB cannot. The lock gives moto DynamoDB's atomicity, nothing more.
    """
    lock = threading.Lock()

    def acquire(**_: Any) -> None:
        lock.acquire()

    def release(**_: Any) -> None:
        lock.release()

    events = dynamodb.meta.events
    events.register("before-call.dynamodb", acquire, unique_id="test-sweeper-serialize-acquire")
    events.register("after-call.dynamodb", release, unique_id="test-sweeper-serialize-release")
    events.register("after-call-error.dynamodb", release, unique_id="test-sweeper-serialize-release-error")


def mass_failure(env: Env, count: int = MASS_FAILURE) -> tuple[Env, list[DispatchRequest]]:
    """``count`` rollouts that started 120 s ago with a 60 s timeout and whose agents all died (no result).

    Returns the experiment with a session budget that holds them all, and their start requests.
    """
    roomy = with_settings(env, session_budget=count + 10)
    one_call_at_a_time(roomy.rt.clients.dynamodb)
    with ThreadPoolExecutor(max_workers=SWEEP_WORKERS) as pool:
        return roomy, list(pool.map(lambda _: running_since(roomy, 120, timeout_s=60), range(count)))


@dataclasses.dataclass
class LambdaContext:
    """A Lambda context whose time left before the function's timeout the test controls."""

    time_left_s: Callable[[], float]
    function_name: str = "sweeper"
    function_version: str = "$LATEST"
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:sweeper"
    memory_limit_in_mb: int = 256
    aws_request_id: str = "sweeper-request"

    def get_remaining_time_in_millis(self) -> int:
        return int(self.time_left_s() * 1000)


def set_budget_counts(env: Env, **counts: int) -> None:
    """Overwrite attributes of the session-budget item, as an operator or a bug might."""
    names = {f"#a{i}": name for i, name in enumerate(counts)}
    values = {f":v{i}": {"N": str(value)} for i, value in enumerate(counts.values())}
    env.rt.clients.dynamodb.update_item(
        TableName=env.rt.settings.budget_table,
        Key={BUDGET_PARTITION_KEY: {"S": SESSION_BUDGET_ID}},
        UpdateExpression="SET " + ", ".join(f"#a{i} = :v{i}" for i in range(len(counts))),
        ExpressionAttributeNames=names,
        ExpressionAttributeValues=values,
    )


def test_overdue_rollout_ends_timed_out_is_stopped_and_frees_its_slot(env: Env) -> None:
    # GIVEN a running rollout with a 60 s timeout and no result
    request = env.start_request(timeout_s=60)
    assert dispatch(request, receive_count=1, rt=env.rt) is DispatchOutcome.INVOKED

    # WHEN the sweeper runs after the deadline
    report = sweep(later(env, 120))

    # THEN a timed_out result is written, the session stopped, the rollout finished and the slot freed
    assert (report.overdue, report.finished) == (1, 1)
    result = env.rt.store.read(request.key)
    assert (result.status, result.error.type) == (Status.TIMED_OUT, "DeadlineExceeded")
    assert stored_provenance(env, request.key) is Provenance.PROVEN  # signed, as the agent's would be (D100)
    assert [c.session_id for c in env.acr.calls_of(STOP)] == [request.session_id]
    assert env.rt.ledger.get(request.session_id).status == Status.TIMED_OUT.value
    assert env.rt.ledger.slots_held() == (0, 0)
    # AND the finisher, seeing the timed_out result's event, changes nothing (its stop finds no session)
    finisher.handler(sqs_event(env.receive(env.finisher_queue_url)), None)
    assert env.rt.ledger.get(request.session_id).status == Status.TIMED_OUT.value
    assert env.rt.ledger.slots_held() == (0, 0)


def test_rollout_before_its_deadline_is_left_alone(env: Env) -> None:
    # GIVEN a running rollout well inside its timeout
    request = env.start_request(timeout_s=600)
    dispatch(request, receive_count=1, rt=env.rt)

    # WHEN the sweeper runs
    report = sweep(env.rt)

    # THEN nothing happens to it
    assert report.overdue == 0
    assert env.rt.ledger.get(request.session_id).state is SessionState.RUNNING
    assert not env.rt.store.exists(request.key)


def test_agent_result_written_just_before_the_sweep_wins(env: Env) -> None:
    # GIVEN an agent that wrote its result at the deadline, before the finisher ran
    request = env.start_request(timeout_s=60)
    dispatch(request, receive_count=1, rt=env.rt)
    agent_writes_result(env, request)

    # WHEN the sweeper runs, then the finisher handles the agent's event
    sweep(later(env, 120))
    transition = finisher.finish_event(env.receive(env.finisher_queue_url)[0]["Body"], env.rt)

    # THEN the agent's result stands, the rollout is finished as succeeded, one slot freed
    assert env.rt.store.read(request.key).status is Status.SUCCEEDED
    assert env.rt.ledger.get(request.session_id).status == Status.SUCCEEDED.value
    assert transition is Transition.ALREADY_FINISHED
    assert env.rt.ledger.slots_held() == (0, 0)


def test_an_art_agents_result_written_before_the_sweep_wins_with_the_status_of_its_fields(env: Env) -> None:
    # GIVEN an unmodified ART agent that stored a failure (no status field) at the deadline
    request = env.start_request(timeout_s=60)
    dispatch(request, receive_count=1, rt=env.rt)
    art_agent_writes_result(env, request, status_code=500, stop_reason="boom", traceback="ValueError: boom\n")

    # WHEN the sweeper runs past the deadline
    report = sweep(later(env, 120))

    # THEN ART's document stands (no timed_out over it) and the rollout finished as what its fields say
    assert report.finished == 1
    assert env.rt.store.read(request.key).status is Status.AGENT_ERROR
    assert env.rt.ledger.get(request.session_id).status == Status.AGENT_ERROR.value
    assert env.rt.ledger.slots_held() == (0, 0)


def test_finisher_first_leaves_nothing_for_the_sweeper(env: Env) -> None:
    # GIVEN a rollout the finisher finished
    request = env.start_request(timeout_s=60)
    dispatch(request, receive_count=1, rt=env.rt)
    agent_writes_result(env, request)
    finisher.handler(sqs_event(env.receive(env.finisher_queue_url)), None)

    # WHEN the sweeper runs after the deadline
    report = sweep(later(env, 120))

    # THEN it finds nothing overdue and the count stays at zero
    assert report.overdue == 0
    assert env.rt.ledger.slots_held() == (0, 0)


def test_reconcile_repairs_a_drifted_slot_count(env: Env) -> None:
    # GIVEN one rollout in flight but a count someone set to 7
    dispatch(env.start_request(), receive_count=1, rt=env.rt)
    set_budget_counts(env, **{"total": 7, held_attribute(env.rt.settings.exp_id): 7})

    # WHEN the sweeper runs
    report = sweep(env.rt)

    # THEN the count matches the inflight index again
    assert report.reconciliation.applied
    assert env.rt.ledger.slots_held() == (1, 1)


def test_freeing_a_slot_when_the_count_drifted_to_zero_never_goes_negative(env: Env) -> None:
    # GIVEN a running rollout whose slot count was wrongly zeroed
    request = env.start_request()
    dispatch(request, receive_count=1, rt=env.rt)
    set_budget_counts(env, **{"total": 0, held_attribute(env.rt.settings.exp_id): 0})

    # WHEN its result is handled
    agent_writes_result(env, request)
    finisher.handler(sqs_event(env.receive(env.finisher_queue_url)), None)

    # THEN the rollout is finished and the count stays at zero
    assert env.rt.ledger.get(request.session_id).state is SessionState.FINISHED
    assert env.rt.ledger.slots_held() == (0, 0)


def test_counts_of_an_experiment_whose_sweeper_stopped_are_dropped(env: Env) -> None:
    # GIVEN another experiment holding 5 slots whose sweeper last ran long ago
    stale_since = time.time() - STALE_EXPERIMENT_S - 60
    set_budget_counts(env, **{"total": 5, held_attribute("gone-exp"): 5, seen_attribute("gone-exp"): int(stale_since)})

    # WHEN this experiment's sweeper runs
    report = sweep(env.rt)

    # THEN the gone experiment's slots return to the account
    assert report.reconciliation.dropped_experiments == ("gone-exp",)
    assert env.rt.ledger.slots_held() == (0, 0)


def test_sweeper_handler_publishes_the_in_flight_gauge(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN two rollouts in flight
    for _ in range(2):
        dispatch(env.start_request(), receive_count=1, rt=env.rt)
    capsys.readouterr()

    # WHEN the scheduled handler runs
    summary = sweeper.handler({"source": "aws.events"}, None)

    # THEN the gauge is on stdout in EMF with the experiment dimension
    assert summary["inflight"] == 2
    (gauge,) = [b for b in emf_blobs(capsys.readouterr().out) if "RolloutsInFlight" in b]
    assert gauge["RolloutsInFlight"] == [2.0]
    assert gauge["exp_id"] == env.rt.settings.exp_id
    assert json.dumps(gauge["_aws"]["CloudWatchMetrics"][0]["Dimensions"]) == '[["exp_id"]]'
    # AND the overdue gauge goes out too, at 0, so its alarm sees data
    assert gauge["RolloutsOverdue"] == [0.0]


def test_overdue_rollout_the_sweeper_cannot_stop_counts_as_stuck_only_past_the_grace(env: Env) -> None:
    # GIVEN two running rollouts (60 s and 300 s timeouts) whose sessions ACR will not stop (throttled)
    stuck = env.start_request(timeout_s=60)
    recent = env.start_request(timeout_s=300)
    for request in (stuck, recent):
        dispatch(request, receive_count=1, rt=env.rt)
    env.acr.fail_next(STOP, THROTTLING, THROTTLING)

    # WHEN the sweeper runs with the first past its deadline by more than the grace, the second by 90 s
    report = sweep(later(env, 60 + OVERDUE_GRACE_S + 30))

    # THEN both are left in flight for the next run, and only the first counts as stuck
    assert (report.overdue, report.finished, report.retry_later, report.stuck) == (2, 0, 2, 1)
    assert [env.rt.ledger.get(r.session_id).inflight for r in (stuck, recent)] == [True, True]
    assert env.rt.ledger.slots_held() == (2, 2)
    # AND once ACR stops sessions again, the next run ends both and nothing is stuck
    report = sweep(later(env, 60 + OVERDUE_GRACE_S + 90))
    assert (report.finished, report.stuck) == (2, 0)
    assert env.rt.ledger.slots_held() == (0, 0)


def test_rollouts_whose_result_write_fails_all_count_as_stuck_and_none_blocks_the_next(env: Env) -> None:
    # GIVEN two running rollouts long past their deadline, and a results bucket that refuses every write
    requests = [env.start_request(timeout_s=60) for _ in range(2)]
    for request in requests:
        dispatch(request, receive_count=1, rt=env.rt)
    env.rt.clients.s3.delete_bucket(Bucket=env.rt.settings.results_bucket)

    # WHEN the sweeper runs
    report = sweep(later(env, 60 + OVERDUE_GRACE_S + 30))

    # THEN the first failure did not end the pass: both were tried, both are stuck in flight, none stopped
    assert (report.overdue, report.retry_later, report.stuck) == (2, 2, 2)
    assert all(env.rt.ledger.get(r.session_id).inflight for r in requests)
    assert env.acr.calls_of(STOP) == []


def test_sweeper_handler_publishes_the_stuck_rollout_in_the_overdue_gauge(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a rollout whose 60 s deadline passed more than the grace ago, and ACR throttling its stop
    request = running_since(env, 60 + OVERDUE_GRACE_S + 60, timeout_s=60)
    env.acr.fail_next(STOP, THROTTLING)
    capsys.readouterr()

    # WHEN the scheduled handler runs
    summary = sweeper.handler({"source": "aws.events"}, None)

    # THEN it reports the rollout stuck, and the EMF line on stdout carries RolloutsOverdue = 1 for the experiment
    assert (summary["stuck"], summary["inflight"]) == (1, 1)
    assert [c.session_id for c in env.acr.calls_of(STOP)] == [request.session_id]
    (gauge,) = [b for b in emf_blobs(capsys.readouterr().out) if "RolloutsOverdue" in b]
    assert gauge["RolloutsOverdue"] == [1.0]
    assert gauge["exp_id"] == env.rt.settings.exp_id
    (directive,) = gauge["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == "AgentcoreRollouts"
    assert directive["Dimensions"] == [["exp_id"]]
    assert {"Name": "RolloutsOverdue", "Unit": "Count"} in directive["Metrics"]


def test_a_mass_failure_is_swept_in_one_run_with_the_stops_in_parallel(env: Env) -> None:
    # GIVEN more overdue rollouts than the sweeper has workers (agents that died at once), and an ACR that
    # answers no stop until SWEEP_WORKERS of them are in flight together
    roomy, requests = mass_failure(env)
    env.acr.hold(STOP, until_in_flight=SWEEP_WORKERS)

    # WHEN the sweeper runs once
    report = sweep(roomy.rt)

    # THEN SWEEP_WORKERS stops overlapped, and every rollout ended as timed_out, stopped once, its slot freed
    assert env.acr.peak_in_flight(STOP) == SWEEP_WORKERS
    assert (report.overdue, report.finished, report.retry_later, report.left_for_next_run, report.stuck) == (
        MASS_FAILURE,
        MASS_FAILURE,
        0,
        0,
        0,
    )
    assert sorted(c.session_id for c in env.acr.calls_of(STOP)) == sorted(r.session_id for r in requests)
    assert {env.rt.store.read(r.key).status for r in requests} == {Status.TIMED_OUT}
    assert env.rt.ledger.slots_held() == (0, 0)
    # AND each slot was freed exactly once: the count was right before the reconciliation looked at it
    assert (report.reconciliation.held_before, report.reconciliation.inflight) == (0, 0)


def test_a_spent_time_budget_leaves_the_rest_for_the_next_run_which_ends_them(
    env: Env, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    # GIVEN a mass failure, and a first run whose time runs out once SWEEP_WORKERS stops reached ACR (which
    # holds them until all are in flight, so no worker can take another rollout before that)
    roomy, requests = mass_failure(env)
    one_call_at_a_time(current_runtime().clients.dynamodb)
    env.acr.hold(STOP, until_in_flight=SWEEP_WORKERS)
    plenty = TIME_MARGIN_S + 40

    def first_run_time_left_s() -> float:
        return plenty if len(env.acr.calls_of(STOP)) < SWEEP_WORKERS else TIME_MARGIN_S - 1

    capsys.readouterr()

    # WHEN the scheduled handler runs with that time budget
    first = sweeper.handler({"source": "aws.events"}, LambdaContext(first_run_time_left_s))

    # THEN it ended the rollouts it took, earliest deadlines first, and left the rest in flight for the next run;
    # none counts as stuck (their deadlines are within the grace)
    assert (first["overdue"], first["finished"], first["retry_later"], first["left_for_next_run"]) == (
        MASS_FAILURE,
        SWEEP_WORKERS,
        0,
        MASS_FAILURE - SWEEP_WORKERS,
    )
    assert (first["stuck"], first["inflight"]) == (0, MASS_FAILURE - SWEEP_WORKERS)
    assert env.rt.ledger.slots_held() == (MASS_FAILURE - SWEEP_WORKERS,) * 2
    by_deadline = sorted(requests, key=lambda r: r.deadline_at)
    assert {c.session_id for c in env.acr.calls_of(STOP)} == {r.session_id for r in by_deadline[:SWEEP_WORKERS]}
    assert not any(env.rt.store.exists(r.key) for r in by_deadline[SWEEP_WORKERS:])
    # AND the run's log says how many were left, and its gauges went out
    (done,) = [r for r in caplog.records if r.getMessage() == "sweep done"]
    assert done.left_for_next_run == MASS_FAILURE - SWEEP_WORKERS
    (gauges,) = [b for b in emf_blobs(capsys.readouterr().out) if "RolloutsInFlight" in b]
    assert (gauges["RolloutsInFlight"], gauges["RolloutsOverdue"]) == ([MASS_FAILURE - SWEEP_WORKERS], [0.0])

    # WHEN the next run has time enough
    second = sweeper.handler({"source": "aws.events"}, LambdaContext(lambda: plenty))

    # THEN it ends every rollout left, and its gauges go out too, now at zero
    assert (second["overdue"], second["finished"], second["left_for_next_run"]) == (
        MASS_FAILURE - SWEEP_WORKERS,
        MASS_FAILURE - SWEEP_WORKERS,
        0,
    )
    assert {env.rt.store.read(r.key).status for r in requests} == {Status.TIMED_OUT}
    assert len(env.acr.calls_of(STOP)) == MASS_FAILURE
    assert env.rt.ledger.slots_held() == (0, 0)
    (gauges,) = [b for b in emf_blobs(capsys.readouterr().out) if "RolloutsInFlight" in b]
    assert (gauges["RolloutsInFlight"], gauges["RolloutsOverdue"]) == ([0.0], [0.0])


def test_a_rollout_left_for_the_next_run_past_the_grace_counts_as_stuck(env: Env) -> None:
    # GIVEN a rollout more than the grace past its deadline and one just past it
    stuck = running_since(env, 60 + OVERDUE_GRACE_S + 60, timeout_s=60)
    recent = running_since(env, 90, timeout_s=60)

    # WHEN a sweep runs with its time budget already spent
    report = sweep(env.rt, time_left_s=lambda: TIME_MARGIN_S)

    # THEN it tries neither, leaves both in flight, and only the first counts in the overdue gauge
    assert (report.overdue, report.finished, report.retry_later, report.left_for_next_run) == (2, 0, 0, 2)
    assert report.stuck == 1
    assert env.acr.calls_of(STOP) == []
    assert [env.rt.ledger.get(r.session_id).inflight for r in (stuck, recent)] == [True, True]


def test_parallel_stops_still_take_their_turns_in_the_shared_invoke_budget(env: Env) -> None:
    # GIVEN overdue rollouts as many as the sweeper's workers, and an invoke budget of 5 calls a second
    roomy, _ = mass_failure(env, SWEEP_WORKERS)
    slow = with_settings(roomy, tps_limit=5)

    # WHEN the sweeper ends them
    report = sweep(slow.rt)

    # THEN the stops reached ACR spread at the budget's pace, not all at once
    assert report.finished == SWEEP_WORKERS
    arrivals = sorted(c.at for c in env.acr.calls_of(STOP))
    assert arrivals[-1] - arrivals[0] >= 0.8 * (SWEEP_WORKERS - 1) * slow.rt.acr.tps.interval_s
