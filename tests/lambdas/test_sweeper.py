"""The sweeper against moto and the ACR double: deadlines, races with the agent, slot reconciliation."""

from __future__ import annotations

import dataclasses
import json
import time

import pytest

from lambdas import finisher, sweeper
from lambdas.dispatcher import DispatchOutcome, dispatch
from lambdas.ledger import STALE_EXPERIMENT_S, Transition
from lambdas.sweeper import sweep
from rollout_contract.budgets import SESSION_BUDGET_ID, held_attribute, seen_attribute
from rollout_contract.messages import DispatchRequest
from rollout_contract.metrics import OVERDUE_GRACE_S
from rollout_contract.protocol import THROTTLING
from rollout_contract.resources import BUDGET_PARTITION_KEY
from rollout_contract.results import Status
from rollout_contract.sessions import SessionState
from tests.lambdas.conftest import STOP, Env, sqs_event
from tests.lambdas.test_finisher import agent_writes_result, emf_blobs


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
    assert [c.session_id for c in env.acr.calls_of(STOP)] == [request.session_id]
    assert env.rt.ledger.get(request.session_id).status == Status.TIMED_OUT.value
    assert env.rt.ledger.slots_held() == (0, 0)
    # AND the finisher, seeing the timed_out result's event, changes nothing
    finisher.handler(sqs_event(env.receive(env.finisher_queue_url)), None)
    assert len(env.acr.calls_of(STOP)) == 1


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

    # THEN the agent's result stands, the rollout is finished as succeeded, one stop, one slot freed
    assert env.rt.store.read(request.key).status is Status.SUCCEEDED
    assert env.rt.ledger.get(request.session_id).status == Status.SUCCEEDED.value
    assert transition is Transition.ALREADY_FINISHED
    assert len(env.acr.calls_of(STOP)) == 1
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
