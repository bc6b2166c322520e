"""Starts that find every session slot taken wait in the function: admitted once a slot frees, reads bounded.

The clock is stepped (it moves only when slept on), and the slot count's poller sleeps through a hook that
frees slots at a chosen poll, so nothing here depends on timing.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable

import boto3
import pytest

from lambdas import _batch, dispatcher
from lambdas.dispatcher import DispatchOutcome, dispatch
from local_stack.worker import LambdaContext
from rollout_budgets.ledger import Ledger
from rollout_budgets.slot_wait import SlotWaiter
from rollout_contract.messages import DispatchRequest
from rollout_contract.results import Status
from rollout_contract.sessions import SessionState
from tests.lambdas.conftest import INVOKE, CallCounter, Env, SteppedClock, failed_ids, punctual, sqs_event

#: Longest the test waits (real time) for the batch's records to be recorded before the first poll.
RECORDED_TIMEOUT_S = 10.0


def fill_the_session_budget(env: Env) -> list[DispatchRequest]:
    """Start as many rollouts as the session budget holds; return them (running, each holding a slot)."""
    running = [env.start_request() for _ in range(env.rt.settings.session_budget)]
    for request in running:
        assert dispatch(request, receive_count=1, rt=env.rt) is DispatchOutcome.INVOKED
    return running


@pytest.fixture
def finisher_ledger(env: Env, boto_session: boto3.Session) -> Ledger:
    """The experiment's ledger on a client of its own (a finisher elsewhere; its calls are not counted)."""
    settings = env.rt.settings
    return Ledger(
        boto_session.client("dynamodb"),
        sessions_table=settings.sessions_table,
        budget_table=settings.budget_table,
        exp_id=settings.exp_id,
        session_budget=settings.session_budget,
    )


def with_poll_hook(env: Env, on_poll: Callable[[int], None]) -> Env:
    """The env on a stepped clock whose slot poller calls ``on_poll(n)`` before its ``n``-th read of the count."""
    env = punctual(env)
    clock: SteppedClock = env.rt.clock  # type: ignore[assignment]
    polls = 0

    def sleep(seconds: float) -> None:
        nonlocal polls
        polls += 1
        on_poll(polls)
        clock.sleep(seconds)

    slots = SlotWaiter(env.rt.ledger.free_slots, clock=clock, sleep=sleep)
    return dataclasses.replace(env, rt=dataclasses.replace(env.rt, slots=slots))


def run_handler(env: Env, monkeypatch: pytest.MonkeyPatch, requests: list[DispatchRequest], *, time_left_s: float):
    """Send ``requests``, receive them as one batch and run the dispatcher's handler with ``time_left_s`` left."""
    for request in requests:
        env.rt.clients.sqs.send_message(QueueUrl=env.dispatch_queue_url, MessageBody=request.to_body())
    messages = env.receive(env.dispatch_queue_url)
    assert len(messages) == len(requests)
    monkeypatch.setattr(dispatcher, "current_runtime", lambda: env.rt)
    monkeypatch.setattr(_batch, "current_runtime", lambda: env.rt)
    context = LambdaContext(
        function_name="dispatcher",
        invoked_function_arn="arn:aws:lambda:::function:dispatcher",
        memory_limit_in_mb=512,
        timeout_s=time_left_s,
    )
    return messages, dispatcher.handler(sqs_event(messages), context)


def finish(ledger: Ledger, request: DispatchRequest) -> None:
    ledger.finish(request.key, status=Status.SUCCEEDED, finished_at=time.time())


def test_a_start_that_finds_no_slot_is_admitted_in_the_same_invocation_once_a_slot_frees(
    env: Env, calls: CallCounter, finisher_ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a full session budget, one of whose rollouts finishes just before the slot count's second read
    running = fill_the_session_budget(env)
    request = env.start_request()
    items_while_waiting: list[object] = []

    def on_poll(poll: int) -> None:
        items_while_waiting.append(finisher_ledger.get(request.session_id))
        if poll == 2:
            finish(finisher_ledger, running[0])

    env = with_poll_hook(env, on_poll)
    calls.take()

    # WHEN its start message is handled with most of the function's time left
    _, response = run_handler(env, monkeypatch, [request], time_left_s=60)

    # THEN it was admitted and invoked in this invocation (not sent back to the queue) once the read saw the
    # freed slot: two reads of the count, the failed start and the same start tried again, with nothing written
    # while it waited, and the slot count stays full
    counted = calls.take()
    assert failed_ids(response) == set()
    assert len(env.acr.calls_of(INVOKE, request.session_id)) == 1
    assert items_while_waiting == [None, None]
    record = env.rt.ledger.get(request.session_id)
    assert (record.state, record.attempts, record.inflight) == (SessionState.RUNNING, 1, True)
    assert (counted["GetItem"], counted["TransactWriteItems"]) == (2, 2)
    assert env.rt.ledger.slots_held() == (3, 3)


def test_a_batch_waiting_for_slots_reads_the_count_once_per_poll_and_requeues_when_the_wait_runs_out(
    env: Env, calls: CallCounter, finisher_ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a full session budget; two of its rollouts finish before the third read of the slot count
    running = fill_the_session_budget(env)
    batch = [env.start_request() for _ in range(5)]

    def on_poll(poll: int) -> None:
        if poll == 1:  # every record of the batch has found no slot and waits (time stands still until then)
            until(lambda: env.rt.slots.waiters == len(batch))
        if poll == 3:
            finish(finisher_ledger, running[0])
            finish(finisher_ledger, running[1])

    env = with_poll_hook(env, on_poll)
    calls.take()

    # WHEN a batch of five start messages is handled with 2 s to wait for slots
    wait_s = 2.0
    messages, response = run_handler(env, monkeypatch, batch, time_left_s=dispatcher.SLOT_WAIT_RESERVE_S + wait_s)
    reads = calls.take()["GetItem"]

    # THEN two records took the freed slots in this invocation and three went back to the queue when the wait
    # ran out, and the count was read once per poll for the whole batch, not once per record
    invoked = {c.session_id for c in env.acr.calls_of(INVOKE)} & {r.session_id for r in batch}
    assert len(invoked) == 2
    waiting = {
        m["MessageId"] for m in messages if DispatchRequest.model_validate_json(m["Body"]).session_id not in invoked
    }
    assert failed_ids(response) == waiting
    polls_in_the_wait = wait_s / env.rt.slots.poll_s
    assert 1 <= reads <= polls_in_the_wait
    for request in batch:
        record = env.rt.ledger.get(request.session_id)
        expected = SessionState.RUNNING if request.session_id in invoked else SessionState.QUEUED
        assert record.state is expected
    assert env.rt.ledger.slots_held() == (3, 3)


def test_a_start_that_arrives_while_others_wait_for_a_slot_skips_the_start_transaction(
    env: Env, calls: CallCounter, finisher_ledger: Ledger
) -> None:
    # GIVEN a full session budget, and a rollout of this process waiting for a slot; two slots free before the
    # count's second read, once a second start waits too
    running = fill_the_session_budget(env)
    first, second = env.start_request(), env.start_request()

    def on_poll(poll: int) -> None:
        if poll == 1:
            until(lambda: env.rt.slots.waiters == 2)
        if poll == 2:
            finish(finisher_ledger, running[0])
            finish(finisher_ledger, running[1])

    env = with_poll_hook(env, on_poll)
    calls.take()
    wait_until = env.rt.clock() + 30
    outcomes: list[DispatchOutcome] = []
    waiting = threading.Thread(
        target=lambda: outcomes.append(dispatch(first, receive_count=1, rt=env.rt, slot_wait_until=wait_until))
    )
    waiting.start()
    until(lambda: env.rt.slots.waiters == 1)

    # WHEN the second start message arrives
    outcomes.append(dispatch(second, receive_count=1, rt=env.rt, slot_wait_until=wait_until))
    waiting.join(timeout=RECORDED_TIMEOUT_S)

    # THEN both started in the freed slots, and only the first paid for a start transaction that found no slot:
    # three transactions in all (one failed start, two admissions), two reads of the count
    assert outcomes == [DispatchOutcome.INVOKED, DispatchOutcome.INVOKED]
    counted = calls.take()
    assert (counted["TransactWriteItems"], counted["GetItem"]) == (3, 2)
    assert env.rt.ledger.slots_held() == (3, 3)


def until(condition: Callable[[], bool]) -> None:
    """Wait (real time, at most ``RECORDED_TIMEOUT_S``) until ``condition`` holds; the test's asserts tell if not."""
    deadline = time.monotonic() + RECORDED_TIMEOUT_S
    while not condition() and time.monotonic() < deadline:
        threading.Event().wait(0.01)
