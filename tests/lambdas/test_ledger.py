"""The ledger against moto: each write returns the item it met, so no read follows it; slots stay exact."""

from __future__ import annotations

import time

from lambdas.ledger import Admission, Transition
from rollout_contract.results import Status
from rollout_contract.sessions import SessionState
from tests.lambdas.conftest import CallCounter, Env


def test_recording_a_new_rollout_returns_the_item_it_wrote(env: Env, calls: CallCounter) -> None:
    # GIVEN a start message nobody has seen
    request = env.start_request()

    # WHEN the rollout is recorded
    record, new = env.rt.ledger.record_queued(request)

    # THEN one write created the item, and what it returns is what a read returns
    assert new
    assert calls.take() == {"UpdateItem": 1}
    assert record == env.rt.ledger.get(request.session_id)
    assert (record.state, record.submitted_at, record.deadline_at) == (
        SessionState.QUEUED,
        request.submitted_at,
        request.deadline_at,
    )


def test_recording_a_rollout_again_returns_the_existing_item_unchanged(env: Env) -> None:
    # GIVEN a rollout that was recorded and admitted
    request = env.start_request()
    env.rt.ledger.record_queued(request)
    assert env.rt.ledger.admit(request.session_id, owner="a", lease_until=time.time() + 60) is Admission.ADMITTED

    # WHEN it is recorded again (a redelivered message)
    record, new = env.rt.ledger.record_queued(request)

    # THEN the write changed nothing and returned the admitted item
    assert not new
    assert (record.state, record.lease_owner, record.inflight) == (SessionState.ADMITTED, "a", True)
    assert env.rt.ledger.get(request.session_id) == record


def test_recording_over_a_cancel_mark_records_the_rollout_but_is_not_new(env: Env) -> None:
    # GIVEN a cancel that marked a rollout no start has recorded
    request = env.start_request()
    assert env.rt.ledger.mark_cancel_requested(request.session_id, requested_at=time.time()) is None

    # WHEN the start records it
    record, new = env.rt.ledger.record_queued(request)

    # THEN the rollout is recorded in full, and the start is told a result may exist
    assert not new
    assert env.rt.ledger.get(request.session_id) == record
    assert record.state is SessionState.QUEUED


def test_cancel_mark_returns_the_recorded_item(env: Env) -> None:
    # GIVEN a recorded rollout
    request = env.start_request()
    env.rt.ledger.record_queued(request)

    # WHEN a cancel marks it
    record = env.rt.ledger.mark_cancel_requested(request.session_id, requested_at=time.time())

    # THEN the mark returns the item as it was, and the item is otherwise unchanged
    assert record is not None
    assert record.submitted_at == request.submitted_at
    assert env.rt.ledger.get(request.session_id) == record


def test_finish_believed_not_holding_still_frees_the_slot_exactly_once(env: Env) -> None:
    # GIVEN an admitted rollout holding a slot
    request = env.start_request()
    env.rt.ledger.record_queued(request)
    env.rt.ledger.admit(request.session_id, owner="a", lease_until=time.time() + 60)

    # WHEN it is finished by a caller that believes it holds none, then again
    first = env.rt.ledger.finish(request.key, status=Status.SUCCEEDED, finished_at=time.time(), holding=False)
    second = env.rt.ledger.finish(request.key, status=Status.SUCCEEDED, finished_at=time.time())

    # THEN the first frees the slot, the second changes nothing
    assert (first, second) == (Transition.RELEASED, Transition.ALREADY_FINISHED)
    assert env.rt.ledger.slots_held() == (0, 0)


def test_finishing_a_finished_rollout_is_told_by_the_failed_write_not_a_read(env: Env, calls: CallCounter) -> None:
    # GIVEN a finished rollout
    request = env.start_request()
    env.rt.ledger.record_queued(request)
    env.rt.ledger.finish(request.key, status=Status.CANCELLED, finished_at=time.time(), holding=False)
    calls.take()

    # WHEN it is finished again
    transition = env.rt.ledger.finish(request.key, status=Status.CANCELLED, finished_at=time.time(), holding=False)

    # THEN one conditional write says so
    assert transition is Transition.ALREADY_FINISHED
    assert calls.take() == {"UpdateItem": 1}
