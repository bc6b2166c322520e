"""The completion poller's receivers: a slow result read does not hold back the events behind it."""

from __future__ import annotations

import json
import threading
import time

import boto3
import pytest

from rollout_contract import ResultKey, new_session_id
from rollout_contract.events import OBJECT_CREATED, S3_SOURCE, ObjectCreated
from trainer_client import PollSettings
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
    sqs = boto3.client("sqs")
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
        CompletionPoller(boto3.client("sqs"), "url", lambda event: event, PollSettings(receivers=0), name="none")
