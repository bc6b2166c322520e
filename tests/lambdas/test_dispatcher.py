"""The dispatcher against moto and the ACR double: once-only starts, budgets, errors, cancels."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from lambdas import dispatcher, finisher
from lambdas.dispatcher import DispatchOutcome, dispatch, retry_delay_s
from lambdas.exceptions import RequeueError
from lambdas.finishing import finish_rollout
from lambdas.runtime import Runtime
from rollout_budgets.ledger import Admission
from rollout_contract.budgets import ATTR_NEXT_AT, tps_budget_id
from rollout_contract.keys import payload_ref_key
from rollout_contract.proof import Provenance
from rollout_contract.protocol import (
    ACCESS_DENIED,
    INTERNAL_SERVER,
    RESOURCE_NOT_FOUND,
    RETRYABLE_CONFLICT,
    RUNTIME_CLIENT_ERROR,
    SERVICE_QUOTA_EXCEEDED,
    THROTTLING,
    VALIDATION,
)
from rollout_contract.resources import BUDGET_PARTITION_KEY
from rollout_contract.results import PROOF_KEY_FIELD, ROLLOUT_FIELD, RolloutResult, Status
from rollout_contract.sessions import SessionState
from tests.lambdas.conftest import (
    BUCKET,
    EXP_ID,
    INVOKE,
    STOP,
    CallCounter,
    Env,
    experiment_proof,
    failed_ids,
    punctual,
    reserve_budget_ahead,
    sqs_event,
    stored_provenance,
)


def send_and_receive(env: Env, *bodies: str) -> list[dict]:
    for body in bodies:
        env.rt.clients.sqs.send_message(QueueUrl=env.dispatch_queue_url, MessageBody=body)
    return env.receive(env.dispatch_queue_url)


def test_start_message_invokes_the_session_once_with_ids_and_timings(env: Env) -> None:
    # GIVEN a start message on the dispatch queue
    request = env.start_request(rollout={"base_url": "http://gateway/v1"})
    messages = send_and_receive(env, request.to_body())

    # WHEN the handler runs on the batch
    response = dispatcher.handler(sqs_event(messages), None)

    # THEN ACR got one invoke for the session, with the save target and timings in _rollout
    assert response == {"batchItemFailures": []}
    (call,) = env.acr.calls_of(INVOKE)
    assert call.session_id == request.session_id
    rollout = call.body[ROLLOUT_FIELD]
    assert (rollout["exp_id"], rollout["input_id"], rollout["s3_bucket"]) == (EXP_ID, "problem-1", BUCKET)
    assert rollout["base_url"] == "http://gateway/v1"
    assert rollout["submitted_at"] == request.submitted_at
    assert request.submitted_at <= rollout["dispatched_at"] <= time.time()
    assert call.body["prompt"] == "2+2"
    # AND _rollout carries the session's proof key, the one the experiment key derives for this session (D100)
    assert rollout[PROOF_KEY_FIELD] == experiment_proof(env).session_key(request.session_id)
    assert rollout[PROOF_KEY_FIELD] != experiment_proof(env).session_key(env.start_request().session_id)
    # AND the rollout is running and holds one slot
    assert env.rt.ledger.get(request.session_id).state is SessionState.RUNNING
    assert env.rt.ledger.slots_held() == (1, 1)


def test_redelivered_dispatch_starts_no_second_rollout(env: Env) -> None:
    # GIVEN a rollout that was dispatched
    request = env.start_request()
    assert dispatch(request, receive_count=1, rt=env.rt) is DispatchOutcome.INVOKED

    # WHEN the same message is delivered again
    outcome = dispatch(request, receive_count=2, rt=env.rt)

    # THEN nothing is invoked again and the slot count is unchanged
    assert outcome is DispatchOutcome.ALREADY_STARTED
    assert len(env.acr.calls_of(INVOKE)) == 1
    assert env.rt.ledger.slots_held() == (1, 1)


def test_crash_after_admission_then_redelivery_invokes_once_and_keeps_one_slot(env: Env) -> None:
    # GIVEN a dispatcher that recorded and admitted a rollout, then died before invoking (lease ran out)
    request = env.start_request()
    queued = env.record_queued(request).record
    assert (
        env.rt.ledger.admit(queued.session_id, attempts_seen=queued.attempts, owner="dead", lease_until=time.time() - 1)
        is Admission.ADMITTED
    )

    # WHEN the message is redelivered
    outcome = dispatch(request, receive_count=2, rt=env.rt)

    # THEN the new dispatcher takes the rollout over with the slot already held and invokes it once
    assert outcome is DispatchOutcome.INVOKED
    assert len(env.acr.calls_of(INVOKE, request.session_id)) == 1
    assert env.rt.ledger.slots_held() == (1, 1)


def test_crash_after_recording_then_redelivery_invokes_once(env: Env) -> None:
    # GIVEN a dispatcher that only recorded the rollout before dying
    request = env.start_request()
    env.record_queued(request)

    # WHEN the message is redelivered, twice
    first = dispatch(request, receive_count=2, rt=env.rt)
    second = dispatch(request, receive_count=3, rt=env.rt)

    # THEN exactly one invoke happened
    assert (first, second) == (DispatchOutcome.INVOKED, DispatchOutcome.ALREADY_STARTED)
    assert len(env.acr.calls_of(INVOKE)) == 1


def test_copy_of_a_message_is_requeued_while_another_dispatcher_holds_the_lease(env: Env) -> None:
    # GIVEN a rollout admitted by a live dispatcher (lease in the future)
    request = env.start_request()
    queued = env.record_queued(request).record
    env.rt.ledger.admit(queued.session_id, attempts_seen=queued.attempts, owner="alive", lease_until=time.time() + 60)

    # WHEN a second copy of the message arrives
    with pytest.raises(RequeueError) as caught:
        dispatch(request, receive_count=1, rt=env.rt)

    # THEN it goes back until the lease ends, and nothing is invoked
    assert 55 < caught.value.delay_s <= 60
    assert env.acr.calls_of(INVOKE) == []


@pytest.mark.parametrize(
    "error", [THROTTLING, RUNTIME_CLIENT_ERROR, SERVICE_QUOTA_EXCEEDED, RETRYABLE_CONFLICT, INTERNAL_SERVER]
)
def test_retryable_invoke_error_requeues_the_message_and_frees_the_slot(env: Env, error) -> None:
    # GIVEN ACR answers the next invoke with a retryable error
    env.acr.fail_next(INVOKE, error)
    request = env.start_request()
    messages = send_and_receive(env, request.to_body())

    # WHEN the handler runs
    response = dispatcher.handler(sqs_event(messages), None)

    # THEN the message is reported failed and hidden for the retry delay, the rollout is queued again
    assert failed_ids(response) == {messages[0]["MessageId"]}
    assert env.receive(env.dispatch_queue_url) == []
    record = env.rt.ledger.get(request.session_id)
    assert (record.state, record.attempts, record.inflight) == (SessionState.QUEUED, 1, False)
    # AND its deadline is the latest again: the attempt's (start + timeout) must not end it while it waits
    assert record.deadline_at == request.deadline_at
    assert env.rt.ledger.slots_held() == (0, 0)
    assert not env.rt.store.exists(request.key)


def test_retry_delay_grows_with_each_attempt_up_to_a_cap() -> None:
    # GIVEN / WHEN the delays of successive attempts
    delays = [retry_delay_s(attempt) for attempt in range(1, 15)]

    # THEN they grow, then stay at the cap
    assert delays[:4] == [1.0, 2.0, 4.0, 8.0]
    assert delays == sorted(delays)
    assert delays[-1] == dispatcher.RETRY_CAP_S


def test_retry_after_a_retryable_error_starts_the_rollout(env: Env) -> None:
    # GIVEN an invoke that was throttled once
    env.acr.fail_next(INVOKE, THROTTLING)
    request = env.start_request()
    with pytest.raises(RequeueError):
        dispatch(request, receive_count=1, rt=env.rt)

    # WHEN the message comes back
    outcome = dispatch(request, receive_count=2, rt=env.rt)

    # THEN the rollout starts, holding one slot
    assert outcome is DispatchOutcome.INVOKED
    assert len(env.acr.calls_of(INVOKE, request.session_id)) == 2
    assert env.rt.ledger.slots_held() == (1, 1)


@pytest.mark.parametrize("error", [VALIDATION, ACCESS_DENIED, RESOURCE_NOT_FOUND])
def test_final_invoke_error_ends_the_rollout_as_dispatch_failed(env: Env, error) -> None:
    # GIVEN ACR rejects the invoke for good
    env.acr.fail_next(INVOKE, error)
    request = env.start_request()
    messages = send_and_receive(env, request.to_body())

    # WHEN the handler runs
    response = dispatcher.handler(sqs_event(messages), None)

    # THEN the message is done and a dispatch_failed result names the error
    assert response == {"batchItemFailures": []}
    result = env.rt.store.read(request.key)
    assert result.status is Status.DISPATCH_FAILED
    assert result.error.type == error.code
    assert result.timings.submitted_at == request.submitted_at
    # AND the dispatcher's own result proves it came from the experiment's functions (D100)
    assert stored_provenance(env, request.key) is Provenance.PROVEN


def test_exhausted_retries_end_the_rollout_as_dispatch_failed(env: Env) -> None:
    # GIVEN ACR throttles every attempt (max_dispatch_attempts = 3)
    env.acr.fail_next(INVOKE, THROTTLING, THROTTLING, THROTTLING)
    request = env.start_request()

    # WHEN the message is delivered until the attempts run out
    for receive in (1, 2):
        with pytest.raises(RequeueError):
            dispatch(request, receive_count=receive, rt=env.rt)
    outcome = dispatch(request, receive_count=3, rt=env.rt)

    # THEN the third failure ends it as dispatch_failed, after three invokes
    assert outcome is DispatchOutcome.FAILED
    assert len(env.acr.calls_of(INVOKE)) == 3
    result = env.rt.store.read(request.key)
    assert (result.status, result.error.type) == (Status.DISPATCH_FAILED, THROTTLING.code)


def test_no_free_session_slot_requeues_without_invoking(env: Env) -> None:
    # GIVEN the session budget (3) is taken by running rollouts
    for _ in range(3):
        assert dispatch(env.start_request(), receive_count=1, rt=env.rt) is DispatchOutcome.INVOKED

    # WHEN one more rollout is dispatched
    request = env.start_request()
    with pytest.raises(RequeueError, match="no free session slot"):
        dispatch(request, receive_count=1, rt=env.rt)

    # THEN it is not invoked, stays queued, and the count stays at the budget
    assert len(env.acr.calls_of(INVOKE)) == 3
    assert env.rt.ledger.get(request.session_id).state is SessionState.QUEUED
    assert env.rt.ledger.slots_held() == (3, 3)


def test_cancel_before_start_writes_cancelled_and_the_later_start_does_not_invoke(env: Env) -> None:
    # GIVEN a cancel that arrives before the start message
    request = env.start_request()
    assert dispatcher.cancel(env.cancel_request(request), env.rt) is DispatchOutcome.CANCELLED

    # WHEN the start message arrives
    outcome = dispatch(request, receive_count=1, rt=env.rt)

    # THEN the rollout is not invoked and its result says cancelled
    assert outcome is DispatchOutcome.RESULT_EXISTS
    assert env.acr.calls_of(INVOKE) == []
    assert env.rt.store.read(request.key).status is Status.CANCELLED


def test_cancel_after_a_result_keeps_the_existing_result(env: Env) -> None:
    # GIVEN a rollout that ended with dispatch_failed
    env.acr.fail_next(INVOKE, VALIDATION)
    request = env.start_request()
    dispatch(request, receive_count=1, rt=env.rt)

    # WHEN a cancel arrives
    outcome = dispatcher.cancel(env.cancel_request(request), env.rt)

    # THEN the first result stays
    assert outcome is DispatchOutcome.CANCEL_TOO_LATE
    assert env.rt.store.read(request.key).status is Status.DISPATCH_FAILED


def test_unparseable_message_goes_to_the_dead_letter_queue_at_once_and_the_batch_runs(env: Env) -> None:
    # GIVEN a batch with a malformed body and a good start message
    request = env.start_request()
    malformed = json.dumps({"kind": "start", "exp_id": EXP_ID})
    messages = send_and_receive(env, malformed, request.to_body())

    # WHEN the handler runs
    response = dispatcher.handler(sqs_event(messages), None)

    # THEN nothing is reported failed (no retry can fix it), the malformed body waits in the dead-letter
    # queue for a human, and the good message was invoked
    assert failed_ids(response) == set()
    dead_letters = env.receive(env.dispatch_dlq_url)
    assert [m["Body"] for m in dead_letters] == [malformed]
    assert [c.session_id for c in env.acr.calls_of(INVOKE)] == [request.session_id]


def test_payload_parked_in_s3_is_fetched_for_the_invoke(env: Env) -> None:
    # GIVEN a payload parked in the results bucket
    session_id = str(uuid.uuid4())
    key = payload_ref_key(EXP_ID, session_id)
    env.rt.clients.s3.put_object(Bucket=BUCKET, Key=key, Body=json.dumps({"prompt": "big"}).encode())
    request = env.start_request(payload=None, payload_ref=key).model_copy(update={"session_id": session_id})

    # WHEN it is dispatched
    outcome = dispatch(request, receive_count=1, rt=env.rt)

    # THEN the agent receives the parked payload
    assert outcome is DispatchOutcome.INVOKED
    assert env.acr.calls_of(INVOKE)[0].body["prompt"] == "big"


def test_missing_parked_payload_ends_the_rollout_as_dispatch_failed(env: Env) -> None:
    # GIVEN a start message whose payload reference points nowhere
    request = env.start_request(payload=None, payload_ref="_payloads/nowhere.json")

    # WHEN it is dispatched
    outcome = dispatch(request, receive_count=1, rt=env.rt)

    # THEN nothing is invoked and the result says why
    assert outcome is DispatchOutcome.FAILED
    assert env.acr.calls_of(INVOKE) == []
    assert env.rt.store.read(request.key).error.type == "PayloadNotFound"


def test_start_message_past_its_queue_timeout_ends_as_dispatch_failed_without_invoking(env: Env) -> None:
    # GIVEN a start message that waited for capacity beyond its queue timeout
    request = env.start_request(timeout_s=600, queue_timeout_s=5, submitted_at=time.time() - 10)

    # WHEN it is dispatched
    outcome = dispatch(request, receive_count=4, rt=env.rt)

    # THEN the rollout ends as dispatch_failed with its own reason, and holds no slot
    assert outcome is DispatchOutcome.FAILED
    assert env.acr.calls_of(INVOKE) == []
    result = env.rt.store.read(request.key)
    assert (result.status, result.error.type) == (Status.DISPATCH_FAILED, dispatcher.QUEUE_WAIT_EXCEEDED)
    assert env.rt.ledger.slots_held() == (0, 0)


def test_time_waiting_for_capacity_does_not_spend_the_rollout_timeout(env: Env) -> None:
    # GIVEN a rollout that waited in the queue longer than its timeout, but within its queue timeout
    request = env.start_request(timeout_s=5, submitted_at=time.time() - 10)

    # WHEN it is dispatched
    before = time.time()
    outcome = dispatch(request, receive_count=4, rt=env.rt)

    # THEN it starts, and its deadline runs from the start: the sweeper leaves it alone for timeout_s
    assert outcome is DispatchOutcome.INVOKED
    deadline_at = env.rt.ledger.get(request.session_id).deadline_at
    assert before + 5 <= deadline_at <= time.time() + 5
    assert list(env.rt.ledger.overdue(time.time())) == []


def test_invoke_racing_a_cancel_stops_the_session_it_started(env: Env) -> None:
    # GIVEN a rollout that the finisher finished (cancelled) while the dispatcher was invoking it
    request = env.start_request()
    env.record_queued(request)
    original_invoke = env.rt.acr.invoke

    def invoke_then_cancel(session_id: str, body: bytes, *, slot_start: float) -> None:
        original_invoke(session_id, body, slot_start=slot_start)
        env.rt.ledger.finish(request.key, status=Status.CANCELLED, finished_at=time.time())

    object.__setattr__(env.rt.acr, "invoke", invoke_then_cancel)

    # WHEN the dispatch completes
    outcome = dispatch(request, receive_count=1, rt=env.rt)

    # THEN the dispatcher stops the session it just started, and the slot is free
    assert outcome is DispatchOutcome.ENDED_WHILE_STARTING
    assert [c.session_id for c in env.acr.calls_of(STOP)] == [request.session_id]
    assert env.rt.ledger.slots_held() == (0, 0)


def test_invoke_budget_reserved_beyond_the_wait_requeues_and_frees_the_slot(env: Env) -> None:
    # GIVEN an invoke budget whose next free slot is a minute away (other dispatchers reserved it)
    reserve_budget_ahead(env, 60)
    request = env.start_request()

    # WHEN the rollout is dispatched
    with pytest.raises(RequeueError, match="invoke budget") as caught:
        dispatch(request, receive_count=1, rt=env.rt)

    # THEN it goes back for about as long as the budget is reserved, holding no slot, with no attempt spent
    assert 50 < caught.value.delay_s < 60
    assert env.acr.calls_of(INVOKE) == []
    record = env.rt.ledger.get(request.session_id)
    assert (record.state, record.attempts) == (SessionState.QUEUED, 0)
    assert env.rt.ledger.slots_held() == (0, 0)


def test_first_delivery_costs_one_transaction_one_token_and_one_write(env: Env, calls: CallCounter) -> None:
    env = punctual(env)
    # GIVEN a dispatcher that has taken an invoke token before (it knows the budget's state)
    assert dispatch(env.start_request(), receive_count=1, rt=env.rt) is DispatchOutcome.INVOKED
    calls.take()

    # WHEN a new start message is delivered for the first time
    request = env.start_request()
    outcome = dispatch(request, receive_count=1, rt=env.rt)

    # THEN the rollout starts with one transaction (record, admit, count the attempt, take the slot), one
    # update for the invoke token and one to mark it running: no read, no HEAD of the result
    assert outcome is DispatchOutcome.INVOKED
    assert calls.take() == {"TransactWriteItems": 1, "UpdateItem": 2}
    record = env.rt.ledger.get(request.session_id)
    assert (record.state, record.attempts, record.inflight) == (SessionState.RUNNING, 1, True)
    assert record.dispatched_at is not None and record.deadline_at < request.deadline_at
    assert env.rt.ledger.slots_held() == (2, 2)


def test_first_delivery_without_a_free_slot_records_the_rollout_queued(env: Env, calls: CallCounter) -> None:
    env = punctual(env)
    # GIVEN a session budget that is full
    for _ in range(env.rt.settings.session_budget):
        assert dispatch(env.start_request(), receive_count=1, rt=env.rt) is DispatchOutcome.INVOKED
    request = env.start_request()
    calls.take()

    # WHEN a new start message is delivered for the first time
    with pytest.raises(RequeueError, match="no free session slot"):
        dispatch(request, receive_count=1, rt=env.rt)

    # THEN the failed transaction wrote nothing, and one write recorded the rollout as queued (no attempt spent)
    assert calls.take() == {"TransactWriteItems": 1, "UpdateItem": 1}
    record = env.rt.ledger.get(request.session_id)
    assert (record.state, record.attempts, record.inflight) == (SessionState.QUEUED, 0, False)
    assert env.acr.calls_of(INVOKE, request.session_id) == []


def test_redelivered_start_of_a_running_rollout_costs_one_read(env: Env, calls: CallCounter) -> None:
    # GIVEN a running rollout
    request = env.start_request()
    dispatch(request, receive_count=1, rt=env.rt)
    calls.take()

    # WHEN its message is delivered again
    outcome = dispatch(request, receive_count=2, rt=env.rt)

    # THEN one read tells the dispatcher it started already
    assert outcome is DispatchOutcome.ALREADY_STARTED
    assert calls.take() == {"GetItem": 1}


def test_duplicate_first_delivery_finds_the_recorded_item_and_starts_nothing(env: Env) -> None:
    # GIVEN a rollout admitted by a live dispatcher
    request = env.start_request()
    dispatch(request, receive_count=1, rt=env.rt)

    # WHEN a duplicate copy of its message arrives, also as a first receive
    outcome = dispatch(request, receive_count=1, rt=env.rt)

    # THEN the record write meets the existing item and nothing is invoked again
    assert outcome is DispatchOutcome.ALREADY_STARTED
    assert len(env.acr.calls_of(INVOKE)) == 1
    assert env.rt.ledger.slots_held() == (1, 1)


def test_start_after_an_early_cancel_checks_for_the_result_before_anything_else(env: Env, calls: CallCounter) -> None:
    # GIVEN a cancel handled before the start message: it marked the item, then wrote its result
    request = env.start_request()
    dispatcher.cancel(env.cancel_request(request), env.rt)
    assert env.rt.ledger.get(request.session_id) is None
    calls.take()

    # WHEN the start message arrives for the first time
    outcome = dispatch(request, receive_count=1, rt=env.rt)

    # THEN the start transaction finds the cancel's mark and writes nothing; the rollout is recorded, the result
    # looked for and found: no slot, no invoke
    assert outcome is DispatchOutcome.RESULT_EXISTS
    assert calls.take() == {"TransactWriteItems": 1, "UpdateItem": 1, "ListObjectsV2": 1}
    assert env.acr.calls_of(INVOKE) == []
    assert env.rt.ledger.slots_held() == (0, 0)


def test_start_racing_a_cancel_that_has_not_written_its_result_is_ended_by_the_cancel(env: Env) -> None:
    # GIVEN a cancel that marked the item but has not written its result yet
    request = env.start_request()
    env.rt.ledger.mark_cancel_requested(request.session_id, requested_at=time.time())

    # WHEN the start message is dispatched, and then the cancel writes its result and the finisher runs
    assert dispatch(request, receive_count=1, rt=env.rt) is DispatchOutcome.INVOKED
    assert dispatcher.cancel(env.cancel_request(request), env.rt) is DispatchOutcome.CANCELLED
    finisher.handler(sqs_event(env.receive(env.finisher_queue_url)), None)

    # THEN the rollout was recorded in full (the sweeper can see it), is stopped and finished as cancelled
    record = env.rt.ledger.get(request.session_id)
    assert (record.state, record.status) == (SessionState.FINISHED, Status.CANCELLED.value)
    assert request.submitted_at + request.timeout_s <= record.deadline_at <= time.time() + request.timeout_s
    assert [c.session_id for c in env.acr.calls_of(STOP)] == [request.session_id]
    assert env.rt.ledger.slots_held() == (0, 0)


def test_cancel_of_a_started_rollout_keeps_its_timings_in_the_result(env: Env) -> None:
    # GIVEN a running rollout
    request = env.start_request()
    dispatch(request, receive_count=1, rt=env.rt)
    dispatched_at = env.rt.ledger.get(request.session_id).dispatched_at

    # WHEN it is cancelled
    dispatcher.cancel(env.cancel_request(request), env.rt)

    # THEN the cancelled result carries the submit and dispatch times the item recorded
    timings = env.rt.store.read(request.key).timings
    assert (timings.submitted_at, timings.dispatched_at) == (request.submitted_at, dispatched_at)
    assert dispatched_at is not None


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"timeout_s": None}, "timeout_s"),
        ({"timeout_s": "Infinity"}, "timeout_s"),
        ({"payload": "not an object"}, "payload"),
        ({"submitted_at": "yesterday"}, "submitted_at"),
    ],
)
def test_unusable_start_message_of_a_known_rollout_ends_it_as_dispatch_failed_at_once(env: Env, change, reason) -> None:
    # GIVEN a start message with valid ids but a field the dispatcher cannot use
    request = env.start_request()
    body = json.dumps({**json.loads(request.to_body()), **change})
    messages = send_and_receive(env, body)

    # WHEN the handler runs
    response = dispatcher.handler(sqs_event(messages), None)

    # THEN the rollout ends at once as dispatch_failed, the result naming the field; nothing is retried
    assert failed_ids(response) == set()
    result = env.rt.store.read(request.key)
    assert result.status is Status.DISPATCH_FAILED
    assert result.error.type == "InvalidDispatchRequest"
    assert reason in result.error.message
    assert env.acr.calls_of(INVOKE) == []
    assert env.receive(env.dispatch_dlq_url) == []


def test_unusable_start_message_of_another_experiment_goes_to_the_dead_letter_queue(env: Env) -> None:
    request = env.start_request()
    body = json.dumps({**json.loads(request.to_body()), "exp_id": "other-exp", "timeout_s": None})
    messages = send_and_receive(env, body)
    assert failed_ids(dispatcher.handler(sqs_event(messages), None)) == set()
    assert [m["Body"] for m in env.receive(env.dispatch_dlq_url)] == [body]


def test_payload_whose_rollout_block_is_not_an_object_ends_as_dispatch_failed_without_invoking(env: Env) -> None:
    # GIVEN a payload whose _rollout is a string
    request = env.start_request(payload={"prompt": "2+2", ROLLOUT_FIELD: "oops"})

    # WHEN it is dispatched
    outcome = dispatch(request, receive_count=1, rt=env.rt)

    # THEN it ends at once as dispatch_failed saying why, and holds no slot
    assert outcome is DispatchOutcome.FAILED
    assert env.acr.calls_of(INVOKE) == []
    result = env.rt.store.read(request.key)
    assert (result.error.type, ROLLOUT_FIELD in result.error.message) == ("InvalidPayload", True)
    assert env.rt.ledger.slots_held() == (0, 0)


def test_stops_come_before_new_invokes_in_the_invoke_budget(env: Env) -> None:
    # GIVEN an invoke budget reserved 1.5 s ahead (stops waiting for their slots)
    reserve_budget_ahead(env, 1.5)
    request = env.start_request()
    env.rt.acr.invoke_wait_s = 0.0  # no waiting for a slot to come within the invoke horizon

    # WHEN a new rollout is dispatched and a finished session is stopped
    with pytest.raises(RequeueError, match="invoke budget"):
        dispatch(request, receive_count=1, rt=env.rt)
    env.rt.acr.stop(str(uuid.uuid4()))

    # THEN the invoke goes back to its queue holding no slot, while the stop gets its slot and is sent
    assert env.acr.calls_of(INVOKE) == []
    assert len(env.acr.calls_of(STOP)) == 1
    assert env.rt.ledger.slots_held() == (0, 0)


def test_an_invoke_whose_budget_is_full_waits_for_a_slot_in_reach_instead_of_going_back_to_the_queue(
    env: Env,
) -> None:
    # GIVEN an invoke budget reserved 1.5 s ahead: no slot within the invoke horizon (1 s) now
    next_at = time.time() + 1.5
    env.rt.clients.dynamodb.put_item(
        TableName=env.rt.settings.budget_table,
        Item={
            BUDGET_PARTITION_KEY: {"S": tps_budget_id(env.rt.settings.runtime_arn, env.rt.settings.runtime_qualifier)},
            ATTR_NEXT_AT: {"N": str(next_at)},
        },
    )
    request = env.start_request()

    # WHEN a new rollout is dispatched
    outcome = dispatch(request, receive_count=1, rt=env.rt)

    # THEN it waited in the function until the slot at next_at came within reach, took it and was invoked once
    assert outcome is DispatchOutcome.INVOKED
    assert len(env.acr.calls_of(INVOKE)) == 1
    # (slot times are sums of floats, DynamoDB adds in decimal: equal to within a microsecond)
    assert env.rt.ledger.get(request.session_id).dispatched_at >= next_at - 1e-6


def test_with_two_endpoints_invokes_go_where_a_token_is_soonest_and_stops_follow_the_session(env: Env) -> None:
    # GIVEN an experiment whose runtime has two endpoints, each with its own invoke budget
    rt = Runtime.build(env.rt.settings.model_copy(update={"runtime_endpoints": 2}), env.rt.clients)
    assert [acr.qualifier for acr in rt.acrs] == ["DEFAULT", "endpoint_1"]
    first, second = env.start_request(), env.start_request()

    # WHEN two rollouts are dispatched, one after the other, and their agents' results are finished
    assert dispatch(first, receive_count=1, rt=rt) is DispatchOutcome.INVOKED
    assert dispatch(second, receive_count=1, rt=rt) is DispatchOutcome.INVOKED
    for request in (first, second):
        result = RolloutResult.terminal(Status.SUCCEEDED, key=request.key, s3_bucket=BUCKET)
        rt.store.write_first(result)
        finish_rollout(result, rt)

    # THEN the second went to the endpoint whose token was sooner (the first's budget had just been spent)
    invoked = {call.session_id: call.qualifier for call in env.acr.calls_of(INVOKE)}
    assert invoked == {first.session_id: "DEFAULT", second.session_id: "endpoint_1"}
    # AND each session's endpoint is on its item, and its stop went to that endpoint and no other
    assert {r.session_id: rt.ledger.get(r.session_id).endpoint for r in (first, second)} == invoked
    assert {call.session_id: call.qualifier for call in env.acr.calls_of(STOP)} == invoked
