"""run_batch / run_batch_async, GRPO groups, and resuming after a restart."""

from __future__ import annotations

import math

import pytest

from rollout_contract import Status
from trainer_client import (
    AgentError,
    ClientClosedError,
    FailurePolicy,
    PollSettings,
    RolloutClient,
    RolloutTimeoutError,
    group_advantages,
    read_journal,
)


def test_run_batch_yields_every_item_with_success_meaning_status_succeeded(client, backend):
    # GIVEN three payloads, one of which makes the agent fail
    payloads = [{"reward": 1.0}, {"end_as": "agent_error"}, {"reward": 0.5}]

    # WHEN they run as a batch
    backend.serve_in_thread(3)
    items = sorted(client.run_batch(payloads, max_concurrent_sessions=3, timeout=60), key=lambda item: item.index)

    # THEN every payload has an item; the agent failure is success=False with its result and an AgentError,
    # its error a string as in ART
    assert [item.success for item in items] == [True, False, True]
    assert items[1].result.status is Status.AGENT_ERROR and isinstance(items[1].exception, AgentError)
    assert items[1].error == f"AgentError: {items[1].exception}" and "boom" in items[1].error
    assert items[0].error is None and items[0].exception is None
    assert [items[0].result.reward, items[2].result.reward] == [1.0, 0.5]
    assert all(item.elapsed > 0 for item in items)


def test_run_batch_keeps_at_most_max_concurrent_sessions_in_flight(client, backend):
    # GIVEN a batch of five with at most two in flight
    items = client.run_batch([{"i": i} for i in range(5)], max_concurrent_sessions=2)

    # WHEN the first two are submitted THEN no third request exists until one of them finishes
    first = next_item_after_serving(items, backend, expected_dispatches=2)
    assert backend.sqs.receive_message(QueueUrl=backend.descriptor.dispatch_queue_url).get("Messages") is None
    remaining = [first]
    backend.serve_in_thread(3)
    remaining.extend(items)
    assert sorted(item.index for item in remaining) == [0, 1, 2, 3, 4]


def next_item_after_serving(items, backend, expected_dispatches):
    """Start the batch, check exactly ``expected_dispatches`` requests are queued, complete them, take one item."""
    iterator = iter(items)
    thread = backend.serve_in_thread(expected_dispatches)
    item = next(iterator)
    thread.join(10)
    assert len(backend.requests) == expected_dispatches
    return item


async def test_run_batch_async_yields_items_without_blocking_the_loop(client, backend):
    # GIVEN a batch served by an agent thread
    backend.serve_in_thread(4)

    # WHEN it runs from asyncio
    items = [item async for item in client.run_batch_async([{"reward": float(i)} for i in range(4)], 2)]

    # THEN all four arrive, successful
    assert sorted(item.result.reward for item in items) == [0.0, 1.0, 2.0, 3.0]
    assert all(item.success for item in items)


def test_batch_item_fails_with_a_timeout_error_when_nothing_is_stored_after_the_deadline(descriptor, backend):
    # GIVEN a client whose grace after the deadline is short, and a rollout no dispatcher ever records
    poll = PollSettings(wait_time_s=1, deadline_grace_s=0.2)
    with RolloutClient.from_descriptor(descriptor, poll=poll, queue_timeout=0.2) as client:
        # WHEN a rollout runs whose deadline is 0.3 s away at the latest (0.2 s to start, then 0.1 s)
        (item,) = list(client.run_batch([{}], max_concurrent_sessions=1, timeout=0.1))

    # THEN its item fails with a timeout error after about deadline + grace
    assert not item.success and item.result is None
    assert isinstance(item.exception, RolloutTimeoutError) and item.error.startswith("RolloutTimeoutError: ")
    assert 0.5 <= item.elapsed < 1.5


def test_group_advantages_are_normalized_by_group_mean_and_std():
    rewards = [1.0, 0.0, 1.0, 0.0]
    assert group_advantages(rewards, eps=0.0) == [1.0, -1.0, 1.0, -1.0]
    assert group_advantages([0.7], eps=1e-6) == [0.0]
    assert all(math.isclose(a, 0.0) for a in group_advantages([0.5, 0.5, 0.5]))


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (FailurePolicy.DROP_GROUP, {"clean": [1.0, 0.0, 1.0]}),
        (FailurePolicy.DROP_FAILED, {"clean": [1.0, 0.0, 1.0], "broken": [1.0, 0.5]}),
        (FailurePolicy.ZERO_REWARD, {"clean": [1.0, 0.0, 1.0], "broken": [1.0, 0.5, 0.0]}),
    ],
)
def test_run_groups_applies_the_failed_member_policy(client, backend, policy, expected):
    # GIVEN two prompts, three samples each; one sample of "broken" fails in the agent
    rewards = {"clean": [1.0, 0.0, 1.0], "broken": [1.0, 0.5, None]}

    def agent(request):
        sample = sum(1 for r in backend.requests if r.input_id == request.input_id) - 1
        reward = rewards[request.input_id][sample]
        payload = {"reward": reward} if reward is not None else {"end_as": "agent_error"}
        return scripted(request.model_copy(update={"payload": payload}))

    scripted, backend.outcome = backend.outcome, agent
    backend.serve_in_thread(6)

    # WHEN the groups run under `policy`
    groups = list(
        client.run_groups([{"q": "clean"}, {"q": "broken"}], 3, 6, input_ids=["clean", "broken"], policy=policy)
    )

    # THEN the policy decides which groups and members are kept, and advantages are normalized per group
    kept = {group.input_id: sorted(group.rewards, reverse=True) for group in groups}
    assert kept == {name: sorted(values, reverse=True) for name, values in expected.items()}
    for group in groups:
        assert group.advantages == pytest.approx(group_advantages(group.rewards))
        assert len(group.failed) == (1 if group.input_id == "broken" else 0)


async def test_run_groups_async_yields_complete_groups(client, backend):
    # GIVEN two prompts with two samples each
    backend.serve_in_thread(4)

    # WHEN they run from asyncio
    groups = [g async for g in client.run_groups_async([{"reward": 1.0}, {"reward": 0.0}], 2, 4)]

    # THEN each group is complete, with zero advantages for equal rewards
    assert sorted(len(group.items) for group in groups) == [2, 2]
    assert all(group.advantages == [0.0, 0.0] for group in groups)


def test_a_new_process_collects_results_of_rollouts_an_earlier_process_submitted(
    descriptor, backend, fast_poll, tmp_path
):
    journal = tmp_path / "submitted.jsonl"
    # GIVEN a trainer that submitted three rollouts with a journal, saw one result, then stopped
    first = RolloutClient.from_descriptor(descriptor, poll=fast_poll)
    items = first.run_batch([{"reward": 0.1}, {"reward": 0.2}, {"reward": 0.3}], 3, journal=journal)
    thread = backend.serve_in_thread(1)
    first_item = next(items)
    thread.join(10)
    first.close()
    # AND one more rollout finished while no trainer ran
    backend.serve(1)

    # WHEN a new process attaches the journal, and the last rollout finishes afterwards
    with RolloutClient.from_descriptor(descriptor, poll=fast_poll) as second:
        futures = second.attach_journal(journal)
        backend.serve(1)
        results = [future.result(timeout=10) for future in futures]

    # THEN it gets all three results; stored ones were read directly and their events consumed
    assert len(read_journal(journal)) == 3
    assert sorted(r.reward for r in results) == [0.1, 0.2, 0.3]
    assert first_item.result.session_id in {r.session_id for r in results}
    assert backend.wait_for_depth(0) == 0


def test_rollouts_pending_at_close_fail_in_the_batch_with_client_closed_error(descriptor, fast_poll):
    client = RolloutClient.from_descriptor(descriptor, poll=fast_poll)
    future = client.submit([({}, "g")])[0]
    client.close()
    with pytest.raises(ClientClosedError):
        future.result(0)
