"""Orphaned result events: deleted by the first live poller that receives them, never left to reach the DLQ."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from trainer_support import BUCKET, aws, scripted

from rollout_contract import DispatchRequest
from rollout_contract.resources import SESSIONS_PARTITION_KEY
from rollout_contract.sessions import ATTR_ALIVE_UNTIL, SessionState, trainer_item_key
from trainer_client import PollSettings, RolloutClient

#: Leases short enough to lapse within a test.
SHORT_LEASE = PollSettings(wait_time_s=1, idle_backoff_s=0.05, lease_s=2.0, lease_cache_s=0.2)


def receive_counts(descriptor) -> list[int]:
    """ApproximateReceiveCount of every message left in the completion queue (received once more to see it)."""
    sqs = aws("sqs")
    counts = []
    while messages := sqs.receive_message(
        QueueUrl=descriptor.completion_queue_url,
        MaxNumberOfMessages=10,
        AttributeNames=["ApproximateReceiveCount"],
        VisibilityTimeout=30,
    ).get("Messages"):
        counts += [int(m["Attributes"]["ApproximateReceiveCount"]) for m in messages]
    return counts


def dlq_depth(descriptor) -> int:
    sqs = aws("sqs")
    url = sqs.get_queue_url(QueueName=descriptor.resources.completion_queue.dlq_name)["QueueUrl"]
    attributes = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    return sum(int(value) for value in attributes.values())


def live_lease(descriptor, trainer: str) -> None:
    """Write a lease item for ``trainer`` that is alive for an hour (another trainer process, running)."""
    aws("dynamodb").put_item(
        TableName=descriptor.sessions_table,
        Item={
            SESSIONS_PARTITION_KEY: {"S": trainer_item_key(trainer)},
            ATTR_ALIVE_UNTIL: {"N": str(time.time() + 3600)},
        },
    )


@pytest.mark.processes
def test_a_killed_trainers_events_are_deleted_and_attach_journal_still_resolves_them(
    descriptor, backend, tmp_path, moto_url
):
    journal = tmp_path / "killed.jsonl"
    # GIVEN a trainer process killed mid-run (SIGKILL: no close, its lease lapses) with eight rollouts running
    with subprocess.Popen(
        [sys.executable, "-c", KILLED_TRAINER, descriptor.model_dump_json(), str(journal)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "AWS_ENDPOINT_URL": moto_url},
    ) as killed:
        assert killed.stdout is not None and killed.stdout.readline().strip() == "submitted"
        backend.receive(8)
        killed.kill()

    # WHEN their results are written while another trainer polls the same experiment through many rollouts
    with RolloutClient.from_descriptor(descriptor, poll=SHORT_LEASE) as other:
        time.sleep(SHORT_LEASE.lease_s)
        for request in backend.requests:
            backend.complete(request)
        for _ in range(6):
            own = other.invoke({"reward": 1.0})
            backend.serve(1)
            assert own.result(timeout=10).reward == 1.0

    # THEN no orphaned event is left (none handed back over and over, none headed for the DLQ)
    assert receive_counts(descriptor) == []
    assert dlq_depth(descriptor) == 0
    # AND a resuming trainer still gets every result, from the store
    with RolloutClient.from_descriptor(descriptor, poll=SHORT_LEASE) as resumed:
        results = [future.result(timeout=10) for future in resumed.attach_journal(journal)]
    assert sorted(r.reward for r in results) == [i / 10 for i in range(8)]


#: A trainer process that submits eight rollouts with a journal, says so, and waits to be killed.
KILLED_TRAINER = """
import sys, time
from rollout_contract import ExperimentDescriptor
from trainer_client import PollSettings, RolloutClient
client = RolloutClient.from_descriptor(
    ExperimentDescriptor.model_validate_json(sys.argv[1]), poll=PollSettings(wait_time_s=1, lease_s=2.0)
)
client.submit([({"reward": i / 10}, f"q{i}") for i in range(8)], journal=sys.argv[2])
print("submitted", flush=True)
time.sleep(600)
"""


def test_an_event_no_dispatcher_recorded_is_deleted(client, backend):
    # GIVEN a result written by a client that never went through our dispatcher (an ART client's)
    foreign = DispatchRequest(exp_id=client.exp_id, input_id="art", session_id="a" * 36, payload={}, timeout_s=60)
    result = scripted(foreign)
    backend.s3.put_object(Bucket=BUCKET, Key=result.result_key, Body=result.to_json_bytes())
    assert backend.wait_for_depth(1) == 1

    # WHEN this client polls for its own rollout
    future = client.invoke({"prompt": "mine"})
    backend.serve(1)
    future.result(timeout=5)

    # THEN the foreign event is gone after one receive: it costs this trainer nothing more
    assert backend.wait_for_depth(0) == 0


def test_events_of_a_live_trainer_are_handed_back_not_deleted(client, backend, descriptor):
    # GIVEN a result of a rollout another live trainer submitted
    live_lease(descriptor, "other-trainer")
    foreign = DispatchRequest(
        exp_id=client.exp_id, input_id="other", session_id="f" * 36, payload={}, timeout_s=60, trainer="other-trainer"
    )
    backend.record(foreign, SessionState.RUNNING)
    backend.complete(foreign)
    assert backend.wait_for_depth(1) == 1

    # WHEN this client polls for its own rollout
    future = client.invoke({"prompt": "mine"})
    backend.serve(1)
    future.result(timeout=5)

    # THEN the foreign event is still in the queue for its owner
    assert backend.wait_for_depth(1) == 1


def test_attach_claims_rollouts_so_their_later_events_reach_the_new_owner(descriptor, backend):
    # GIVEN a trainer that closed with three rollouts running, and another trainer polling the experiment
    first = RolloutClient.from_descriptor(descriptor, poll=SHORT_LEASE)
    futures = [first.invoke({"reward": 0.5}, input_id="g") for _ in range(3)]
    backend.receive(3)
    keys = [future.result_key for future in futures]
    first.close()
    with (
        RolloutClient.from_descriptor(descriptor, poll=SHORT_LEASE) as poller,
        RolloutClient.from_descriptor(descriptor, poll=SHORT_LEASE) as resumed,
    ):
        busy = poller.invoke({"reward": 1.0})

        # WHEN a third trainer attaches them before their results are written
        attached = resumed.attach(keys)
        for request in backend.requests[:3]:
            backend.complete(request)
        backend.serve(1)

        # THEN the new owner gets every result through its events, the other poller handed them back
        assert [future.result(timeout=10).reward for future in attached] == [0.5] * 3
        assert all(future.event_sent_at is not None for future in attached)
        busy.result(timeout=10)


def test_dispatch_requests_and_cancels_name_their_trainer(client, backend):
    # GIVEN a client's rollout WHEN it is submitted and cancelled THEN both messages name the client's trainer id
    future = client.invoke({})
    future.cancel()
    start, cancel = backend.receive(2)
    assert start.trainer == cancel.trainer == client.trainer_id


def test_a_lease_shorter_than_two_long_polls_is_refused(descriptor):
    # GIVEN a lease renewed between receives WHEN it would not outlast two long polls THEN the client refuses it
    with pytest.raises(ValueError, match="lease_s .* must be at least twice wait_time_s"):
        RolloutClient.from_descriptor(descriptor, poll=PollSettings(wait_time_s=20, lease_s=30))
