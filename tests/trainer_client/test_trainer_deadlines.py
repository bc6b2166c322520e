"""The deadline fallback: a future whose result event is lost is settled from the store after its deadline."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest
from trainer_support import aws

from rollout_contract import DispatchRequest
from rollout_contract.sessions import SessionState
from trainer_client import PollSettings, RolloutClient, RolloutTimeoutError

#: A short grace, so the fallback acts within a second or two of a short deadline.
LATE_POLL = PollSettings(wait_time_s=1, idle_backoff_s=0.05, deadline_grace_s=0.5)


def lose_result_events(descriptor) -> None:
    """Take the completion queue off the result rule, as an operator editing the rule would."""
    events = aws("events")
    rule = descriptor.resources.result_rule_name
    targets = events.list_targets_by_rule(Rule=rule)["Targets"]
    events.remove_targets(Rule=rule, Ids=[target["Id"] for target in targets])


def count_calls(client: RolloutClient) -> Counter[str]:
    """Count every AWS call the client's own boto3 clients make, by operation name."""
    calls: Counter[str] = Counter()
    for boto_client in client._clients:
        if boto_client is not None:
            boto_client.meta.events.register("before-call.*.*", lambda model, **_: calls.update([model.name]))
    return calls


def test_a_lost_event_resolves_the_future_from_the_stored_result_after_the_deadline(descriptor, backend):
    # GIVEN a rollout whose result is stored while no result event reaches the completion queue
    with RolloutClient.from_descriptor(descriptor, poll=LATE_POLL) as client:
        future = client.invoke({"reward": 0.5}, timeout=1)
        lose_result_events(descriptor)
        backend.serve(1)

        # WHEN its deadline and the grace pass
        result = future.result(timeout=15)

    # THEN the future holds the stored result (on main it waited forever)
    assert result.reward == 0.5
    assert future.event_sent_at is None


def test_a_rollout_with_no_stored_result_fails_with_a_timeout_error_saying_so(descriptor, backend):
    # GIVEN a rollout that started (recorded running) and never wrote a result, with no sweeper around
    with RolloutClient.from_descriptor(descriptor, poll=LATE_POLL) as client:
        future = client.invoke({}, timeout=1)
        backend.receive(1)

        # WHEN its deadline and the grace pass
        with pytest.raises(RolloutTimeoutError) as raised:
            future.result(timeout=15)

    # THEN the error says that nothing is stored and points at the sweeper
    assert "no result is stored" in str(raised.value)
    assert "sweeper" in str(raised.value)


def test_await_batches_and_attach_are_settled_by_the_fallback_too(descriptor, backend, tmp_path):
    journal = tmp_path / "journal.jsonl"
    # GIVEN rollouts awaited, run in a batch, and attached by a second process, all of whose events are lost
    with RolloutClient.from_descriptor(descriptor, poll=LATE_POLL) as client:
        lose_result_events(descriptor)
        awaited = client.invoke({"reward": 0.1}, timeout=1)
        items = client.run_batch([{"reward": 0.2}, {"reward": 0.3}], 2, timeout=1, journal=journal)
        thread = backend.serve_in_thread(3)

        # WHEN each is waited for in its own way
        result = asyncio.run(asyncio.wait_for(_awaited(awaited), 15))
        batch = sorted(item.result.reward for item in items)
        thread.join(10)
    with RolloutClient.from_descriptor(descriptor, poll=LATE_POLL) as second:
        attached = [future.result(timeout=15) for future in second.attach_journal(journal)]

    # THEN every one ends with its stored result
    assert result.reward == 0.1
    assert batch == [0.2, 0.3]
    assert sorted(r.reward for r in attached) == [0.2, 0.3]


async def _awaited(future):
    return await future


def test_the_happy_path_makes_no_extra_call(descriptor, backend):
    # GIVEN a client whose every AWS call is counted
    with RolloutClient.from_descriptor(descriptor, poll=LATE_POLL) as client:
        calls = count_calls(client)
        reads: Counter[str] = Counter()
        client._clients.s3.meta.events.register(
            "provide-client-params.s3.GetObject", lambda params, **_: reads.update([params["Key"]])
        )
        submitted = time.monotonic()
        futures = [client.invoke({"i": i}, timeout=5) for i in range(20)]

        # WHEN all twenty resolve from their events, and their deadlines and the grace pass
        backend.serve(20)
        results = [future.result(timeout=15) for future in futures]
        time.sleep(max(0.0, submitted + 5 + LATE_POLL.deadline_grace_s + 1 - time.monotonic()))

    # THEN no check was made: no sessions read, and one GetObject per rollout (its own result), twice for a result
    # read before moto set its proof (moto sets an object's metadata after it is visible; D100)
    assert len(results) == 20
    assert calls["BatchGetItem"] == 0
    assert len(reads) == 20 and set(reads.values()) <= {1, 2} and calls["GetObject"] == reads.total()
    assert client._deadlines is not None and client._deadlines.calls == 0
    print(f"calls for 20 rollouts on the happy path: {dict(calls)}")


def test_checks_follow_the_recorded_deadline_of_a_rollout_that_started_late(descriptor, backend):
    # GIVEN a rollout recorded as running with a deadline later than submit + timeout (it waited for a slot)
    with RolloutClient.from_descriptor(descriptor, poll=LATE_POLL) as client:
        future = client.invoke({"reward": 0.7}, timeout=1)
        (request,) = backend.receive(1)
        assert isinstance(request, DispatchRequest)
        late = request.model_copy(update={"submitted_at": time.time() + 2})
        backend.record(late, SessionState.RUNNING)
        lose_result_events(descriptor)

        # WHEN the first check finds it still running, and the agent writes its result before the late deadline
        time.sleep(2)
        assert not future.done()
        backend.complete(late)

        # THEN the future resolves from the store after the recorded deadline
        assert future.result(timeout=15).reward == 0.7
