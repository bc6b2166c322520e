"""The completion poller's receivers: a slow result read does not hold back the events behind it."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

import pytest
from trainer_support import aws

from rollout_contract import ResultKey, new_session_id
from rollout_contract.events import OBJECT_CREATED, S3_SOURCE, ObjectCreated
from trainer_client import ClientClosedError, PollSettings
from trainer_client._future import RolloutFuture
from trainer_client._poller import CompletionPoller

#: Longest a test waits for anything (real time); a pass takes a few seconds.
WAIT_S = 10.0
#: Longer than a long poll (``wait_time_s=1``): every receiver has gone back to waiting for futures.
IDLE_S = 1.5


def _event(bucket: str, key: ResultKey) -> str:
    return json.dumps(
        {
            "source": S3_SOURCE,
            "detail-type": OBJECT_CREATED,
            "detail": {"bucket": {"name": bucket}, "object": {"key": str(key)}},
        }
    )


class SlowReads:
    """A result loader whose read of ``slow`` waits until ``quick`` has resolved (or ``WAIT_S`` passed)."""

    def __init__(self) -> None:
        self.slow: str | None = None
        self.quick_resolved = threading.Event()

    def __call__(self, event: ObjectCreated) -> str:
        if event.key == self.slow:
            self.quick_resolved.wait(WAIT_S)
        return event.key


@pytest.mark.parametrize("receivers", [2, 3])
def test_an_event_behind_a_slow_result_read_resolves_while_that_read_goes_on(receivers: int) -> None:
    # GIVEN a poller whose result read of a "slow" rollout blocks until the "quick" one has resolved
    sqs = aws("sqs")
    queue_url = sqs.create_queue(QueueName=f"completion-{new_session_id()[:8]}")["QueueUrl"]
    reads = SlowReads()
    poller = CompletionPoller(sqs, queue_url, reads, PollSettings(wait_time_s=1, receivers=receivers), name="poller")
    try:
        # WHEN two such pairs come one after the other (the poller idle in between, every receiver asleep), the
        # slow rollout's event first, the quick one's once a receiver is reading the slow result
        for round_ in range(2):
            if round_:
                time.sleep(IDLE_S)
            slow, quick = (ResultKey("exp", "q", new_session_id()) for _ in range(2))
            reads.slow, reads.quick_resolved = str(slow), threading.Event()
            futures = {key: RolloutFuture(key, "bucket", deadline_at=time.time() + 60) for key in (slow, quick)}
            futures[quick].add_done_callback(lambda _, done=reads.quick_resolved: done.set())
            poller.register_all(list(futures.values()))
            sqs.send_message(QueueUrl=queue_url, MessageBody=_event("bucket", slow))
            sqs.send_message(QueueUrl=queue_url, MessageBody=_event("bucket", quick))

            # THEN each time the quick rollout resolves while the slow read still waits on it (one receiver would
            # wait the read out), and both end with their results
            assert reads.quick_resolved.wait(WAIT_S / 2)
            assert futures[slow].result(timeout=WAIT_S) == str(slow)
            assert futures[quick].result(timeout=WAIT_S) == str(quick)
    finally:
        poller.close()
    # AND every event was deleted
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == attributes["ApproximateNumberOfMessagesNotVisible"] == "0"


def test_a_poller_needs_a_receiver() -> None:
    with pytest.raises(ValueError, match="receivers must be at least 1"):
        CompletionPoller(aws("sqs"), "url", lambda event: event, PollSettings(receivers=0), name="none")


class BlockedLongPoll:
    """An SQS double whose receive blocks until ``release`` (a long poll in progress), then returns ``message``."""

    def __init__(self) -> None:
        self.receiving = threading.Event()
        self.released = threading.Event()
        self.message: dict[str, str] | None = None
        self.handed_back: list[str] = []
        self.deleted: list[str] = []

    def receive_message(self, **_request: object) -> dict[str, object]:
        self.receiving.set()
        self.released.wait(WAIT_S * 3)
        return {"Messages": [self.message] if self.message else []}

    def change_message_visibility_batch(self, QueueUrl: str, Entries: list[dict[str, object]]) -> dict[str, object]:
        self.handed_back.extend(str(entry["ReceiptHandle"]) for entry in Entries)
        return {}

    def delete_message_batch(self, QueueUrl: str, Entries: list[dict[str, object]]) -> dict[str, object]:
        self.deleted.extend(str(entry["ReceiptHandle"]) for entry in Entries)
        return {}


def test_close_returns_during_a_long_poll_and_the_event_it_brings_goes_back_to_the_queue() -> None:
    # GIVEN a poller with one pending rollout and a receiver inside a 20 s long poll
    sqs = BlockedLongPoll()
    poller = CompletionPoller(sqs, "url", lambda event: event.key, PollSettings(receivers=1), name="poller")
    key = ResultKey("exp", "q", new_session_id())
    future = RolloutFuture(key, "bucket")
    poller.register_all([future])
    assert sqs.receiving.wait(WAIT_S)
    # WHEN the client closes while that long poll is still open
    closing = threading.Thread(target=poller.close)
    closing.start()
    closing.join(WAIT_S)
    # THEN close has returned without waiting for the receive, and the pending future failed
    assert not closing.is_alive()
    assert not sqs.released.is_set()
    with pytest.raises(ClientClosedError):
        future.result(timeout=0)
    # AND WHEN the long poll then returns that rollout's result event
    sqs.message = {"Body": _event("bucket", key), "ReceiptHandle": "r-1"}
    sqs.released.set()
    # THEN the event is handed back to the queue (for another process or a later attach), not deleted
    assert wait_for(lambda: sqs.handed_back == ["r-1"])
    assert sqs.deleted == []


def wait_for(condition: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + WAIT_S
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


class LongPollQueue:
    """An SQS double with real long-poll behaviour: a receive waits until a message is there (or 20 s)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.messages: list[dict[str, str]] = []
        self.open_receives = 0

    def send(self, body: str) -> None:
        with self.cond:
            self.messages.append({"Body": body, "ReceiptHandle": new_session_id()})
            self.cond.notify_all()

    def receive_message(self, **request: object) -> dict[str, object]:
        with self.cond:
            self.open_receives += 1
            self.cond.wait_for(lambda: self.messages, timeout=20)
            taken, self.messages = self.messages[:10], self.messages[10:]
            self.open_receives -= 1
            return {"Messages": taken}

    def delete_message_batch(self, **request: object) -> dict[str, object]:
        return {}

    def change_message_visibility_batch(self, **request: object) -> dict[str, object]:
        return {}


def test_once_every_pending_event_is_in_hand_no_receive_stays_open() -> None:
    # GIVEN a poller with two receivers and three pending rollouts
    queue = LongPollQueue()
    poller = CompletionPoller(queue, "url", lambda event: event.key, PollSettings(receivers=2), name="poller")
    keys = [ResultKey("exp", "q", new_session_id()) for _ in range(3)]
    futures = [RolloutFuture(key, "bucket") for key in keys]
    try:
        poller.register_all(futures)
        # WHEN their events arrive one by one, each after the one before resolved
        for key, future in zip(keys, futures, strict=True):
            assert wait_for(lambda: queue.open_receives == 1)
            queue.send(_event("bucket", key))
            assert future.result(timeout=WAIT_S) == str(key)
        # THEN no receive is left open (one per receiver would keep a long poll going after the work is done)
        assert wait_for(lambda: queue.open_receives == 0)
    finally:
        poller.close()
