"""The ledger against moto: each write returns the item it met, so no read follows it; slots stay exact."""

from __future__ import annotations

import time

import pytest
from botocore.exceptions import ClientError

from rollout_budgets.ledger import Admission, Ledger, Transition
from rollout_contract.resources import SESSIONS_PARTITION_KEY
from rollout_contract.results import Status
from rollout_contract.retry import TRANSACTION_CONFLICTS
from rollout_contract.sessions import ATTR_TRAINER, SessionState
from tests.lambdas.conftest import CallCounter, Env


def test_recording_a_new_rollout_returns_the_item_it_wrote(env: Env, calls: CallCounter) -> None:
    # GIVEN a start message nobody has seen
    request = env.start_request()

    # WHEN the rollout is recorded
    record, new = env.record_queued(request)

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
    queued = env.record_queued(request).record
    assert (
        env.rt.ledger.admit(queued.session_id, attempts_seen=queued.attempts, owner="a", lease_until=time.time() + 60)
        is Admission.ADMITTED
    )

    # WHEN it is recorded again (a redelivered message)
    record, new = env.record_queued(request)

    # THEN the write changed nothing and returned the admitted item
    assert not new
    assert (record.state, record.lease_owner, record.inflight) == (SessionState.ADMITTED, "a", True)
    assert env.rt.ledger.get(request.session_id) == record


def test_recording_over_a_cancel_mark_records_the_rollout_but_is_not_new(env: Env) -> None:
    # GIVEN a cancel that marked a rollout no start has recorded
    request = env.start_request()
    assert env.rt.ledger.mark_cancel_requested(request.session_id, requested_at=time.time()) is None

    # WHEN the start records it
    record, new = env.record_queued(request)

    # THEN the rollout is recorded in full, and the start is told a result may exist
    assert not new
    assert env.rt.ledger.get(request.session_id) == record
    assert record.state is SessionState.QUEUED


def test_cancel_mark_returns_the_recorded_item(env: Env) -> None:
    # GIVEN a recorded rollout
    request = env.start_request()
    env.record_queued(request)

    # WHEN a cancel marks it
    record = env.rt.ledger.mark_cancel_requested(request.session_id, requested_at=time.time())

    # THEN the mark returns the item as it was, and the item is otherwise unchanged
    assert record is not None
    assert record.submitted_at == request.submitted_at
    assert env.rt.ledger.get(request.session_id) == record


def test_finish_believed_not_holding_still_frees_the_slot_exactly_once(env: Env) -> None:
    # GIVEN an admitted rollout holding a slot
    request = env.start_request()
    queued = env.record_queued(request).record
    env.rt.ledger.admit(queued.session_id, attempts_seen=queued.attempts, owner="a", lease_until=time.time() + 60)

    # WHEN it is finished by a caller that believes it holds none, then again
    first = env.rt.ledger.finish(request.key, status=Status.SUCCEEDED, finished_at=time.time(), holding=False)
    second = env.rt.ledger.finish(request.key, status=Status.SUCCEEDED, finished_at=time.time())

    # THEN the first frees the slot, the second changes nothing
    assert (first, second) == (Transition.RELEASED, Transition.ALREADY_FINISHED)
    assert env.rt.ledger.slots_held() == (0, 0)


def test_finishing_a_finished_rollout_is_told_by_the_failed_write_not_a_read(env: Env, calls: CallCounter) -> None:
    # GIVEN a finished rollout
    request = env.start_request()
    env.record_queued(request)
    env.rt.ledger.finish(request.key, status=Status.CANCELLED, finished_at=time.time(), holding=False)
    calls.take()

    # WHEN it is finished again
    transition = env.rt.ledger.finish(request.key, status=Status.CANCELLED, finished_at=time.time(), holding=False)

    # THEN one conditional write says so
    assert transition is Transition.ALREADY_FINISHED
    assert calls.take() == {"UpdateItem": 1}


class _ConflictingDynamoDB:
    """A DynamoDB client whose next ``conflicts`` transactions are cancelled by a concurrent one."""

    def __init__(self, client: object, conflicts: int) -> None:
        self._client = client
        self.conflicts = conflicts

    def transact_write_items(self, **request: object) -> object:
        if self.conflicts:
            self.conflicts -= 1
            error = {
                "Error": {"Code": "TransactionCanceledException", "Message": "Transaction cancelled"},
                "CancellationReasons": [{"Code": "None"}, {"Code": "TransactionConflict"}],
            }
            raise ClientError(error, "TransactWriteItems")
        return self._client.transact_write_items(**request)

    def __getattr__(self, name: str) -> object:
        return getattr(self._client, name)


def _ledger_over(env: Env, dynamodb: object) -> Ledger:
    settings = env.rt.settings
    return Ledger(
        dynamodb,
        sessions_table=settings.sessions_table,
        budget_table=settings.budget_table,
        exp_id=settings.exp_id,
        session_budget=settings.session_budget,
        sleep=lambda _seconds: None,
    )


def test_a_slot_transaction_that_conflicts_with_a_concurrent_one_is_retried(env: Env) -> None:
    # GIVEN a queued rollout and a budget item that two concurrent transactions touch first
    request = env.start_request()
    queued = env.record_queued(request).record
    dynamodb = _ConflictingDynamoDB(env.rt.clients.dynamodb, conflicts=2)

    # WHEN the dispatcher asks for a slot
    admission = _ledger_over(env, dynamodb).admit(
        queued.session_id, attempts_seen=queued.attempts, owner="a", lease_until=time.time() + 60
    )

    # THEN the conflicts were retried and the slot taken once
    assert admission is Admission.ADMITTED and dynamodb.conflicts == 0
    assert env.rt.ledger.get(request.session_id).inflight


def test_a_transaction_that_keeps_conflicting_raises_after_its_attempts(env: Env) -> None:
    # GIVEN a budget item so contended that every attempt conflicts
    request = env.start_request()
    queued = env.record_queued(request).record
    dynamodb = _ConflictingDynamoDB(env.rt.clients.dynamodb, conflicts=TRANSACTION_CONFLICTS.attempts)

    # WHEN the dispatcher asks for a slot THEN the error surfaces (the message is retried by SQS) and no slot is held
    with pytest.raises(ClientError, match="TransactionCanceled"):
        _ledger_over(env, dynamodb).admit(
            queued.session_id, attempts_seen=queued.attempts, owner="a", lease_until=time.time() + 60
        )
    assert not env.rt.ledger.get(request.session_id).inflight


def _trainer_of(env: Env, session_id: str) -> str | None:
    item = env.rt.clients.dynamodb.get_item(TableName=env.rt.settings.sessions_table, Key=_key(session_id))["Item"]
    return item[ATTR_TRAINER]["S"] if ATTR_TRAINER in item else None


def _key(session_id: str) -> dict[str, dict[str, str]]:
    return {SESSIONS_PARTITION_KEY: {"S": session_id}}


def test_a_start_records_the_requests_trainer_but_keeps_one_an_attach_claimed_first(env: Env) -> None:
    # GIVEN one rollout nobody has seen, and one a resuming trainer claimed before any start recorded it
    fresh, claimed = env.start_request(trainer="first"), env.start_request(trainer="first")
    env.rt.clients.dynamodb.update_item(
        TableName=env.rt.settings.sessions_table,
        Key=_key(claimed.session_id),
        UpdateExpression="SET #t = :t",
        ExpressionAttributeNames={"#t": ATTR_TRAINER},
        ExpressionAttributeValues={":t": {"S": "resumed"}},
    )

    # WHEN both are started (one transaction each, no extra call)
    for request in (fresh, claimed):
        env.rt.ledger.start(
            request.key,
            submitted_at=request.submitted_at,
            deadline_at=request.deadline_at,
            trainer=request.trainer,
            owner="d",
            lease_until=time.time() + 60,
        )

    # THEN each item names the trainer its events are for
    assert _trainer_of(env, fresh.session_id) == "first"
    assert _trainer_of(env, claimed.session_id) == "resumed"


def test_a_cancel_before_the_start_records_the_trainer(env: Env) -> None:
    # GIVEN a cancel that arrives before its rollout's start WHEN it marks the item THEN the item names the trainer
    request = env.start_request(trainer="first")
    env.rt.ledger.mark_cancel_requested(request.session_id, requested_at=time.time(), trainer="first")
    assert _trainer_of(env, request.session_id) == "first"
