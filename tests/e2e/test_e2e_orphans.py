"""Orphaned and lost result events on the real local stack: the dispatcher records each rollout's trainer.

A trainer killed mid-run leaves events no one will take: another trainer polling the same experiment deletes
them once the killed one's lease has run out (none is handed back over and over, none reaches the DLQ), and a
resuming trainer still collects every result from the store. A result event that never reaches the completion
queue (its rule target removed) is found by the deadline fallback.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import boto3
import pytest
from e2e_support import EXP, run_trainer_process

from local_stack.provision import COMPLETION_TARGET_ID
from local_stack.stack import LocalStack
from rollout_contract import ExperimentResources, Status
from trainer_client import PollSettings, RolloutClient

pytestmark = pytest.mark.e2e

NAMES = ExperimentResources.for_experiment(EXP)
#: The killed trainer's lease: short, so the other trainer sees it lapse within the test.
LEASE_S = 3.0


def _depth(queue: str) -> int:
    sqs = boto3.client("sqs")
    url = sqs.get_queue_url(QueueName=queue)["QueueUrl"]
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    return sum(int(v) for v in sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"].values())


def _count_calls(client: RolloutClient) -> Counter[str]:
    calls: Counter[str] = Counter()
    client._clients.sqs.meta.events.register("before-call.sqs.*", lambda model, **_: calls.update([model.name]))
    return calls


def test_a_killed_trainers_events_are_deleted_by_another_trainer_and_its_journal_still_resolves(
    stack: LocalStack, tmp_path: Path
) -> None:
    journal = tmp_path / "killed.jsonl"
    # GIVEN a trainer process that submitted six rollouts and died without closing its client
    done = run_trainer_process(
        stack, EXP, "orphan", "6", "--no-wait", "--journal", str(journal), "--lease", str(LEASE_S), "--sleep", "1"
    )
    assert done.returncode == 0, done.stderr
    # WHEN another trainer runs its own rollouts on the same experiment for a while
    with RolloutClient.for_experiment(EXP, poll=PollSettings(wait_time_s=1)) as other:
        calls = _count_calls(other)
        began = time.monotonic()
        rounds = 0
        while time.monotonic() - began < LEASE_S + 12:
            futures = [other.invoke({"action": "succeed", "sleep_s": 0.5}, timeout=60) for _ in range(2)]
            assert all(future.result(timeout=60).status is Status.SUCCEEDED for future in futures)
            rounds += 1
        # THEN the killed trainer's six events are gone: deleted, not handed back and forth or dead-lettered
        deadline = time.monotonic() + 10
        while _depth(NAMES.completion_queue.name) and time.monotonic() < deadline:
            time.sleep(0.2)
    assert _depth(NAMES.completion_queue.name) == 0
    assert _depth(NAMES.completion_queue.dlq_name) == 0
    print(f"other trainer: {rounds} rounds, {dict(calls)}")
    assert calls["ChangeMessageVisibilityBatch"] <= rounds * 2
    # AND a resuming trainer collects all six from the store
    with RolloutClient.for_experiment(EXP, poll=PollSettings(wait_time_s=1)) as resumed:
        results = [future.result(timeout=60) for future in resumed.attach_journal(journal)]
    assert [r.status for r in results] == [Status.SUCCEEDED] * 6


@contextmanager
def _completion_target_removed() -> Iterator[None]:
    """Take the completion queue off the result rule, as an operator editing the rule would; put it back after."""
    events = boto3.client("events")
    (target,) = [
        t
        for t in events.list_targets_by_rule(Rule=NAMES.result_rule_name)["Targets"]
        if t["Id"] == COMPLETION_TARGET_ID
    ]
    events.remove_targets(Rule=NAMES.result_rule_name, Ids=[COMPLETION_TARGET_ID])
    try:
        yield
    finally:
        events.put_targets(Rule=NAMES.result_rule_name, Targets=[target])


def test_a_result_whose_event_is_lost_resolves_the_future_after_the_deadline(stack: LocalStack) -> None:
    # GIVEN a rollout whose result event cannot reach the completion queue
    with (
        _completion_target_removed(),
        RolloutClient.for_experiment(EXP, poll=PollSettings(wait_time_s=1, deadline_grace_s=2)) as client,
    ):
        future = client.invoke({"action": "succeed", "sleep_s": 0.5}, timeout=3)
        # WHEN its deadline and the grace pass THEN the future holds the stored result (it waited forever on main)
        result = future.result(timeout=60)
    assert result.status is Status.SUCCEEDED
    assert future.event_sent_at is None
