"""The finisher against moto and the ACR double: stop, finish, free the slot, count, exactly once."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from lambdas import finisher
from lambdas.dispatcher import DispatchOutcome, cancel, dispatch
from lambdas.runtime import current_runtime
from rollout_budgets.ledger import Transition
from rollout_contract.keys import payload_ref_key
from rollout_contract.messages import DispatchRequest
from rollout_contract.protocol import RESOURCE_NOT_FOUND, THROTTLING
from rollout_contract.results import RolloutResult, Status, Timings
from rollout_contract.sessions import SessionState
from tests.lambdas.conftest import (
    BUCKET,
    EXP_ID,
    STOP,
    CallCounter,
    Env,
    failed_ids,
    punctual,
    reserve_budget_ahead,
    sqs_event,
)


def agent_writes_result(env: Env, request: DispatchRequest, *, rewards: float = 1.0) -> RolloutResult:
    """What the agent does at the end of a rollout: one conditional put of its result."""
    now = time.time()
    result = RolloutResult.from_handler_output(
        {"rewards": rewards, "answer": "4"},
        key=request.key,
        s3_bucket=BUCKET,
        payload=request.payload,
        timings=Timings(submitted_at=request.submitted_at, dispatched_at=now - 3, started_at=now - 2, finished_at=now),
    )
    env.rt.store.write_first(result)
    return result


def art_agent_writes_result(env: Env, request: DispatchRequest, **handler_fields: Any) -> None:
    """What ART 0.2.0's agent stores: the handler's dict plus ART's metadata, no status and none of our fields,
    written as its ``save_result`` writes it (``json.dumps(..., indent=2)``, unconditional)."""
    document = {"stop_reason": "end_turn", "status_code": 200, **handler_fields}
    document.update(input_id=request.input_id, s3_bucket=BUCKET, result_key=str(request.key), payload=request.payload)
    env.rt.clients.s3.put_object(Bucket=BUCKET, Key=str(request.key), Body=json.dumps(document, indent=2))


def emf_blobs(output: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.splitlines() if line.startswith('{"_aws"')]


def test_result_event_stops_the_session_marks_it_finished_and_frees_the_slot(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a running rollout whose agent wrote its result (S3 -> EventBridge -> the finisher queue)
    request = env.start_request()
    assert dispatch(request, receive_count=1, rt=env.rt) is DispatchOutcome.INVOKED
    agent_writes_result(env, request, rewards=0.75)
    messages = env.receive(env.finisher_queue_url)
    capsys.readouterr()

    # WHEN the finisher handles the event
    response = finisher.handler(sqs_event(messages), None)

    # THEN the session is stopped, the rollout is finished with the result's status, and the slot is free
    assert response == {"batchItemFailures": []}
    assert [c.session_id for c in env.acr.calls_of(STOP)] == [request.session_id]
    record = env.rt.ledger.get(request.session_id)
    assert (record.state, record.status, record.inflight) == (SessionState.FINISHED, "succeeded", False)
    assert env.rt.ledger.slots_held() == (0, 0)
    # AND the metrics went to stdout in EMF, namespace AgentcoreRollouts, dimension exp_id
    blobs = emf_blobs(capsys.readouterr().out)
    completed = next(b for b in blobs if "RolloutsCompleted" in b)
    assert completed["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "AgentcoreRollouts"
    assert completed["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["exp_id", "status"]]
    assert (completed["exp_id"], completed["status"], completed["RolloutsCompleted"]) == (EXP_ID, "succeeded", [1.0])
    measures = next(b for b in blobs if "Reward" in b)
    assert measures["exp_id"] == EXP_ID
    assert measures["Reward"] == [0.75]
    assert measures["RolloutDuration"] == pytest.approx([2.0])
    assert measures["StartDelay"] == pytest.approx([1.0])
    # AND the stop counts against the invoke budget's metric
    assert measures["SessionStops"] == [1.0]
    # AND the time from the result stored to the slot freed, and the stop's wait for its token, are measured
    assert 0 <= measures["SlotFreeDelay"][0] < 5
    assert measures["StopTokenWait"] == pytest.approx([0.0], abs=0.2)


def test_an_object_that_is_no_result_document_ends_the_rollout_as_agent_error(env: Env) -> None:
    # GIVEN a running rollout at whose key something else stored a bare success (no ids), before the agent (D100)
    request = env.start_request()
    assert dispatch(request, receive_count=1, rt=env.rt) is DispatchOutcome.INVOKED
    env.rt.clients.s3.put_object(Bucket=BUCKET, Key=str(request.key), Body=b'{"rewards": 1.0}', IfNoneMatch="*")

    # WHEN the finisher handles its event
    response = finisher.handler(sqs_event(env.receive(env.finisher_queue_url)), None)

    # THEN the rollout still ends (stopped, finished, its slot free) as the trainer reads it: not the agent's
    assert response == {"batchItemFailures": []}
    assert [c.session_id for c in env.acr.calls_of(STOP)] == [request.session_id]
    record = env.rt.ledger.get(request.session_id)
    assert (record.state, record.status) == (SessionState.FINISHED, "agent_error")
    assert env.rt.ledger.slots_held() == (0, 0)


@pytest.mark.parametrize(
    ("handler_fields", "status"),
    [
        ({"rewards": [0.0, 1.0], "status": "mine"}, "succeeded"),
        ({"status_code": 500, "stop_reason": "boom", "traceback": "Traceback ...\nValueError: boom\n"}, "agent_error"),
    ],
)
def test_an_unmodified_art_agents_result_is_finished_with_the_status_of_its_fields(
    env: Env, handler_fields: dict[str, Any], status: str
) -> None:
    # GIVEN a running rollout whose agent is ART 0.2.0's: it stores the handler's dict plus ART's metadata,
    # no status and none of our fields (json.dumps(..., indent=2), as ART's save_result writes it)
    request = env.start_request()
    dispatch(request, receive_count=1, rt=env.rt)
    art_agent_writes_result(env, request, **handler_fields)

    # WHEN the finisher handles its event
    response = finisher.handler(sqs_event(env.receive(env.finisher_queue_url)), None)

    # THEN the rollout is finished with the status ART's fields say, its session stopped and its slot free
    assert response == {"batchItemFailures": []}
    record = env.rt.ledger.get(request.session_id)
    assert (record.state, record.status, record.inflight) == (SessionState.FINISHED, status, False)
    assert [c.session_id for c in env.acr.calls_of(STOP)] == [request.session_id]
    assert env.rt.ledger.slots_held() == (0, 0)


def test_a_run_is_finished_by_the_experiment_and_counted_per_run_too(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a running rollout of run 'qwen3_gsm8k/2' of the experiment, whose agent wrote its result
    request = env.start_request(exp_id=f"{EXP_ID}/qwen3_gsm8k/2")
    assert dispatch(request, receive_count=1, rt=env.rt) is DispatchOutcome.INVOKED
    agent_writes_result(env, request, rewards=0.5)
    messages = env.receive(env.finisher_queue_url)
    capsys.readouterr()

    # WHEN the experiment's finisher handles the event (the experiment's rule covers every run's prefix)
    assert finisher.handler(sqs_event(messages), None) == {"batchItemFailures": []}

    # THEN the rollout is finished and its slot freed, as any other of the experiment
    assert env.rt.ledger.get(request.session_id).state is SessionState.FINISHED
    assert env.rt.ledger.slots_held() == (0, 0)
    # AND it counts in the experiment's metrics and once more in the run's (dimension run)
    blobs = emf_blobs(capsys.readouterr().out)
    completed = [b for b in blobs if "RolloutsCompleted" in b]
    assert [b["_aws"]["CloudWatchMetrics"][0]["Dimensions"] for b in completed] == [
        [["exp_id", "status"]],
        [["exp_id", "status", "run"]],
    ]
    assert (completed[1]["exp_id"], completed[1]["run"]) == (EXP_ID, "qwen3_gsm8k/2")
    run_reward = next(b for b in blobs if "Reward" in b and "run" in b)
    assert run_reward["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["exp_id", "run"]]
    assert run_reward["Reward"] == [0.5]


def test_duplicate_events_change_nothing(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a finished rollout whose event the finisher already handled
    request = env.start_request()
    dispatch(request, receive_count=1, rt=env.rt)
    agent_writes_result(env, request)
    messages = env.receive(env.finisher_queue_url)
    finisher.handler(sqs_event(messages), None)
    capsys.readouterr()

    # WHEN the same event arrives twice more
    finisher.handler(sqs_event(messages), None)
    finisher.handler(sqs_event(messages), None)

    # THEN no extra slot freed (never negative), no second completion metric; each repeat cost a stop that
    # found no session (no read comes before the stop)
    assert len(env.acr.calls_of(STOP)) == 3
    assert env.rt.ledger.get(request.session_id).state is SessionState.FINISHED
    assert env.rt.ledger.slots_held() == (0, 0)
    blobs = emf_blobs(capsys.readouterr().out)
    assert not any("RolloutsCompleted" in b for b in blobs)
    assert [b["SessionStops"] for b in blobs if "SessionStops" in b] == [[1.0], [1.0]]


def test_dispatch_failed_result_frees_the_slot_without_a_stop_call(env: Env) -> None:
    # GIVEN a rollout that holds a slot and ended as dispatch_failed
    request = env.start_request(payload=None, payload_ref=payload_ref_key(EXP_ID, "s" * 36))
    env.record_queued(request)
    assert dispatch(request, receive_count=1, rt=env.rt) is DispatchOutcome.FAILED

    # WHEN the finisher handles its event
    response = finisher.handler(sqs_event(env.receive(env.finisher_queue_url)), None)

    # THEN the rollout is finished without a StopRuntimeSession
    assert response == {"batchItemFailures": []}
    assert env.acr.calls_of(STOP) == []
    assert env.rt.ledger.get(request.session_id).status == Status.DISPATCH_FAILED.value


def test_objects_that_are_not_results_are_ignored(env: Env) -> None:
    # GIVEN an event for an object that is not a result key (under the prefix, wrong shape)
    env.rt.clients.s3.put_object(Bucket=BUCKET, Key=f"{EXP_ID}/notes.txt", Body=b"x")
    messages = env.receive(env.finisher_queue_url)

    # WHEN the finisher handles it
    response = finisher.handler(sqs_event(messages), None)

    # THEN it succeeds without touching ACR
    assert len(messages) == 1
    assert response == {"batchItemFailures": []}
    assert env.acr.calls_of(STOP) == []


def test_session_unknown_to_acr_is_finished_anyway(env: Env) -> None:
    # GIVEN a running rollout whose session ACR already dropped
    request = env.start_request()
    dispatch(request, receive_count=1, rt=env.rt)
    agent_writes_result(env, request)
    env.acr.fail_next(STOP, RESOURCE_NOT_FOUND)

    # WHEN the finisher handles the event
    response = finisher.handler(sqs_event(env.receive(env.finisher_queue_url)), None)

    # THEN the rollout is finished and its slot freed
    assert response == {"batchItemFailures": []}
    assert env.rt.ledger.get(request.session_id).state is SessionState.FINISHED
    assert env.rt.ledger.slots_held() == (0, 0)


def test_a_throttled_stop_holds_no_slot_and_the_redelivery_stops_the_session(env: Env) -> None:
    # GIVEN a finished agent whose first stop call is throttled
    request = env.start_request()
    dispatch(request, receive_count=1, rt=env.rt)
    agent_writes_result(env, request)
    env.acr.fail_next(STOP, THROTTLING)
    messages = env.receive(env.finisher_queue_url)

    # WHEN the finisher handles the event, then its redelivery
    first = finisher.handler(sqs_event(messages), None)
    held_between = env.rt.ledger.slots_held()
    second = finisher.handler(sqs_event(messages), None)

    # THEN the first attempt frees the slot (the result is stored) and is reported failed for its stop;
    # the redelivery stops the session and counts nothing twice
    assert failed_ids(first) == {messages[0]["MessageId"]}
    assert held_between == (0, 0)
    assert second == {"batchItemFailures": []}
    assert [c.session_id for c in env.acr.calls_of(STOP)] == [request.session_id] * 2
    assert env.rt.ledger.get(request.session_id).state is SessionState.FINISHED
    assert env.rt.ledger.slots_held() == (0, 0)


def test_a_stop_with_no_token_in_reach_frees_the_slot_and_fails_the_record_for_its_stop(env: Env) -> None:
    # GIVEN a finished agent, and an invoke budget reserved beyond the stops' horizon (5 s)
    request = env.start_request()
    dispatch(request, receive_count=1, rt=env.rt)
    agent_writes_result(env, request)
    reserve_budget_ahead(env, 30)
    messages = env.receive(env.finisher_queue_url)

    # WHEN the finisher handles the event
    response = finisher.handler(sqs_event(messages), None)

    # THEN the slot is free at once, no stop went out, and the record comes back for the stop
    assert failed_ids(response) == {messages[0]["MessageId"]}
    assert env.rt.ledger.slots_held() == (0, 0)
    assert env.rt.ledger.get(request.session_id).state is SessionState.FINISHED
    assert env.acr.calls_of(STOP) == []


def test_the_stops_token_comes_before_the_invoke_its_freed_slot_lets_in(env: Env) -> None:
    env = punctual(env)
    # GIVEN a running rollout whose agent wrote its result, and a dispatcher that reserves an invoke token the
    # moment the slot is freed (a start waiting for that slot)
    request = env.start_request()
    dispatch(request, receive_count=1, rt=env.rt)
    agent_writes_result(env, request)
    slots: dict[str, float] = {}
    acr, ledger = env.rt.acr, env.rt.ledger
    reserve_stop, finish = acr.reserve_stop, ledger.finish

    def recording_reserve_stop() -> float:
        slots["stop"] = reserve_stop()
        return slots["stop"]

    def finish_then_admit(*args: Any, **kwargs: Any) -> Transition:
        transition = finish(*args, **kwargs)
        slots["invoke"] = acr.reserve_invoke()
        return transition

    acr.reserve_stop = recording_reserve_stop  # type: ignore[method-assign]
    ledger.finish = finish_then_admit  # type: ignore[method-assign]

    # WHEN the finisher handles the event
    finisher.finish_event(env.receive(env.finisher_queue_url)[0]["Body"], env.rt)

    # THEN the stop's slot is earlier than the invoke's, and the stop was sent
    assert slots["stop"] < slots["invoke"]
    assert [c.session_id for c in env.acr.calls_of(STOP)] == [request.session_id]


def test_a_failed_finish_logs_its_reason_and_comes_back_within_a_minute(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    # GIVEN a finished agent whose stop call is throttled
    request = env.start_request()
    dispatch(request, receive_count=1, rt=env.rt)
    agent_writes_result(env, request)
    env.acr.fail_next(STOP, THROTTLING)
    messages = env.receive(env.finisher_queue_url)
    sqs = CallCounter().watch(current_runtime().clients.sqs)

    # WHEN the finisher fails the record
    finisher.handler(sqs_event(messages), None)

    # THEN the reason is logged with the message, and the record is made visible again in 5 s (not six timeouts)
    (logged,) = [r for r in caplog.records if r.getMessage().startswith("could not finish a rollout")]
    assert logged.message_id == messages[0]["MessageId"]  # type: ignore[attr-defined]
    assert "ThrottlingException" in logged.error and logged.retry_in_s == 5  # type: ignore[attr-defined]
    assert sqs.take() == {"ChangeMessageVisibility": 1}
    assert finisher.retry_delay_s(1) == 5 and finisher.retry_delay_s(20) == finisher.MAX_RETRY_DELAY_S == 60


def test_cancel_after_start_stops_the_session_through_the_finisher(env: Env) -> None:
    # GIVEN a running rollout
    request = env.start_request()
    dispatch(request, receive_count=1, rt=env.rt)

    # WHEN the trainer cancels it and the finisher handles the cancelled result's event
    assert cancel(env.cancel_request(request), env.rt) is DispatchOutcome.CANCELLED
    finisher.handler(sqs_event(env.receive(env.finisher_queue_url)), None)

    # THEN its session is stopped, it is finished as cancelled, and the slot is free
    assert [c.session_id for c in env.acr.calls_of(STOP)] == [request.session_id]
    assert env.rt.ledger.get(request.session_id).status == Status.CANCELLED.value
    assert env.rt.ledger.slots_held() == (0, 0)


def test_result_event_costs_one_token_and_one_transaction(env: Env, calls: CallCounter) -> None:
    env = punctual(env)
    # GIVEN a running rollout whose agent wrote its result
    request = env.start_request()
    dispatch(request, receive_count=1, rt=env.rt)
    agent_writes_result(env, request)
    messages = env.receive(env.finisher_queue_url)
    calls.take()

    # WHEN the finisher handles the event
    transition = finisher.finish_event(messages[0]["Body"], env.rt)

    # THEN it read the result, took one invoke token for the stop and finished in one transaction: no item read
    assert calls.take() == {"GetObject": 1, "UpdateItem": 1, "TransactWriteItems": 1}
    assert transition is Transition.RELEASED
    assert env.rt.ledger.slots_held() == (0, 0)


def test_cancelled_before_start_is_finished_without_a_slot_to_free(env: Env, calls: CallCounter) -> None:
    env = punctual(env)
    # GIVEN a rollout cancelled before its start message was handled (its item is the cancel's mark alone)
    # AND a finisher that has taken an invoke token before (it knows the budget's state)
    request = env.start_request()
    cancel(env.cancel_request(request), env.rt)
    messages = env.receive(env.finisher_queue_url)
    env.rt.acr.tps.reserve(horizon_s=1)
    calls.take()

    # WHEN the finisher handles the cancelled result's event
    transition = finisher.finish_event(messages[0]["Body"], env.rt)

    # THEN the rollout is finished as cancelled with one write (a result never dispatched holds no slot, so no
    # transaction is tried first) besides the read of the result and the stop's token
    assert transition is Transition.FINISHED
    assert calls.take() == {"GetObject": 1, "UpdateItem": 2}
    assert env.rt.ledger.get(request.session_id).status == Status.CANCELLED.value
    assert env.rt.ledger.slots_held() == (0, 0)
