"""Submit -> S3 result -> EventBridge -> completion queue -> resolved future, through moto."""

from __future__ import annotations

import asyncio
import json
import time
from concurrent.futures import CancelledError

import pytest
from trainer_support import aws

from rollout_contract import CancelRequest, InvalidIdError, Status, payload_ref_key
from rollout_contract.messages import SQS_MAX_INLINE_PAYLOAD_BYTES
from trainer_client import (
    AgentError,
    ClientClosedError,
    DispatchFailedError,
    ExperimentNotFoundError,
    RolloutCancelledError,
    RolloutClient,
    RolloutTimeoutError,
)

STATUS_ERRORS = {
    Status.AGENT_ERROR: AgentError,
    Status.TIMED_OUT: RolloutTimeoutError,
    Status.CANCELLED: RolloutCancelledError,
    Status.DISPATCH_FAILED: DispatchFailedError,
}


@pytest.mark.parametrize("status", list(Status))
def test_every_terminal_status_resolves_the_future_with_its_result(client, backend, status, descriptor):
    # GIVEN a submitted rollout
    future = client.invoke({"prompt": "6*7", "end_as": status.value, "reward": 0.5}, input_id="q1")

    # WHEN it ends with `status` (result object written to S3)
    backend.serve(1)

    # THEN the future resolves with that status and the right ids
    result = future.result(timeout=5)
    assert result.status is status
    assert (result.session_id, result.input_id, result.result_key) == (
        future.session_id,
        "q1",
        future.result_key,
    )
    assert future.done() and future.s3_bucket == descriptor.results_bucket


def test_raise_for_status_raises_the_family_of_each_failure_status(client, backend):
    # GIVEN one rollout per status
    futures = {status: client.invoke({"end_as": status.value}) for status in Status}

    # WHEN they all end
    backend.serve(len(futures))

    # THEN a success returns itself with its reward, each failure raises its own error carrying the result
    assert futures[Status.SUCCEEDED].result(5).raise_for_status().reward == 1.0
    for status, error in STATUS_ERRORS.items():
        result = futures[status].result(5)
        with pytest.raises(error) as caught:
            result.raise_for_status()
        assert caught.value.result is result


def test_result_timeout_raises_builtin_timeout_error_without_overshoot_and_cancels_as_art_does(client, backend):
    # GIVEN two rollouts nobody completes
    future = client.invoke({"prompt": "slow"})
    kept = client.invoke({"prompt": "slow"})

    # WHEN the caller waits 0.3 s for each, the second time keeping the rollout
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        future.result(timeout=0.3)
    waited = time.monotonic() - start
    with pytest.raises(TimeoutError):
        kept.result(timeout=0.1, cancel_on_timeout=False)

    # THEN it gave up on time and cancelled the first rollout (a cancel request went out), as ART stops the
    # session; the second is still pending
    assert 0.3 <= waited < 0.45
    assert future.cancelled and future.cancelled()
    with pytest.raises(CancelledError):
        future.result()
    assert not kept.done() and not kept.cancelled
    messages = backend.receive(3)
    assert [m.session_id for m in messages if isinstance(m, CancelRequest)] == [future.session_id]


def test_duplicate_events_are_deleted_and_do_not_change_the_result(client, backend, descriptor):
    # GIVEN a rollout whose result arrived
    future = client.invoke({"reward": 0.25})
    (request,) = backend.serve(1)
    first = future.result(5)

    # WHEN the same result object produces more events (an S3 rewrite, a redelivery)
    for _ in range(2):
        backend.s3.copy_object(
            Bucket=descriptor.results_bucket,
            Key=first.result_key,
            CopySource={"Bucket": descriptor.results_bucket, "Key": first.result_key},
            MetadataDirective="REPLACE",
        )
    client.invoke({"keep": "the poller busy"})

    # THEN the duplicates are consumed (deleted, not handed back) and the result stays the first one
    assert backend.wait_for_depth(0) == 0
    assert future.result(0).reward == 0.25


def test_two_clients_on_one_experiment_each_get_exactly_their_own_results(descriptor, backend, fast_poll):
    # GIVEN two trainer processes on one experiment, each with its own rollouts
    with (
        RolloutClient.from_descriptor(descriptor, poll=fast_poll) as first,
        RolloutClient.from_descriptor(descriptor, poll=fast_poll) as second,
    ):
        mine = {
            client: [client.invoke({"owner": name, "i": i}) for i in range(6)]
            for client, name in ((first, "first"), (second, "second"))
        }

        # WHEN all twelve results arrive on the shared completion queue
        backend.serve(12)

        # THEN each client resolves all of its own futures with its own results: none lost, none stolen
        for client, name in ((first, "first"), (second, "second")):
            results = [future.result(timeout=15) for future in mine[client]]
            assert [r.payload["owner"] for r in results] == [name] * 6
            assert {r.session_id for r in results} == {f.session_id for f in mine[client]}
        assert backend.wait_for_depth(0) == 0


def test_cancel_raises_cancelled_error_and_sends_a_cancel_request(client, backend):
    # GIVEN a running rollout
    future = client.invoke({"prompt": "long"}, input_id="g1")
    (start,) = backend.receive(1)

    # WHEN the trainer cancels it
    assert future.cancel() is True

    # THEN the future is cancelled at once (ART's rule) and the dispatcher is asked to cancel the rollout
    with pytest.raises(CancelledError):
        future.result(0)
    (cancel,) = backend.receive(1)
    assert isinstance(cancel, CancelRequest) and cancel.key == start.key

    # AND the `cancelled` result the dispatcher then writes is consumed as a duplicate
    backend.complete(start.model_copy(update={"payload": {"end_as": "cancelled"}}))
    client.invoke({"keep": "the poller busy"})
    assert backend.wait_for_depth(0) == 0


def test_cancel_after_the_result_arrived_returns_false(client, backend, descriptor):
    # GIVEN a finished rollout
    future = client.invoke({})
    backend.serve(1)
    future.result(5)

    # WHEN the trainer cancels it THEN nothing happens
    assert future.cancel() is False
    assert future.result(0).status is Status.SUCCEEDED
    assert backend.sqs.receive_message(QueueUrl=backend.descriptor.dispatch_queue_url).get("Messages") is None


async def test_async_paths_await_results_without_blocking_the_loop(client, backend):
    # GIVEN rollouts submitted from asyncio
    futures = [await client.invoke_async({"reward": float(i)}) for i in range(3)]

    # WHEN the agent completes them from another thread while the loop awaits
    serving = asyncio.create_task(asyncio.to_thread(backend.serve, 3))
    results = [await futures[0], await futures[1].result_async(timeout=5), await futures[2]]
    await serving

    # THEN each awaitable gives its result
    assert [r.reward for r in results] == [0.0, 1.0, 2.0]


async def test_async_timeout_cancels_the_rollout_unless_told_to_keep_it(client, backend):
    # GIVEN two rollouts nobody completes
    future = await client.invoke_async({})
    kept = await client.invoke_async({})

    # WHEN an async wait times out for each, the second keeping its rollout
    with pytest.raises(TimeoutError):
        await future.result_async(timeout=0.2)
    with pytest.raises(TimeoutError):
        await kept.result_async(timeout=0.1, cancel_on_timeout=False)

    # THEN the first is cancelled (one cancel request), the second still runs
    assert future.cancelled() and not kept.cancelled() and not kept.done()
    messages = backend.receive(3)
    assert [m.session_id for m in messages if isinstance(m, CancelRequest)] == [future.session_id]


def test_large_payload_travels_by_s3_reference(client, backend, descriptor):
    # GIVEN a payload larger than an SQS message may be
    payload = {"document": "x" * (SQS_MAX_INLINE_PAYLOAD_BYTES + 1024)}

    # WHEN it is submitted
    future = client.invoke(payload)

    # THEN the dispatch message references the payload parked in S3 at the contract's key
    (request,) = backend.receive(1)
    assert request.payload is None
    assert request.payload_ref == payload_ref_key(client.exp_id, future.session_id)
    stored = backend.s3.get_object(Bucket=descriptor.results_bucket, Key=request.payload_ref)["Body"].read()
    assert json.loads(stored) == payload


def test_rollout_block_carries_model_fields_and_extra_config(descriptor, backend, fast_poll):
    # GIVEN ART's positional constructor with base_url, model_id and extra config
    with RolloutClient(
        descriptor.runtime_arn,
        descriptor.results_bucket,
        descriptor.exp_id,
        5,
        25,
        10,
        "http://vllm:8000/v1",
        "qwen",
        poll=fast_poll,
        sampling_params={"temperature": 0.7},
    ) as client:
        # WHEN a rollout is submitted with a per-call override
        client.invoke({"q": 1}, timeout=60, sampling_params={"temperature": 1.0})

    # THEN the dispatch request carries them for the agent's `_rollout` block, and the deadline
    (request,) = backend.receive(1)
    assert request.rollout == {
        "base_url": "http://vllm:8000/v1",
        "model_id": "qwen",
        "sampling_params": {"temperature": 1.0},
    }
    assert request.timeout_s == 60


def test_bad_session_id_is_rejected_before_anything_is_sent(client, backend, descriptor):
    # WHEN a session id is too short for AgentCore Runtime THEN the error says so and nothing is queued
    with pytest.raises(InvalidIdError, match="33-256"):
        client.invoke({}, session_id="short")
    assert backend.sqs.receive_message(QueueUrl=backend.descriptor.dispatch_queue_url).get("Messages") is None


def test_unknown_experiment_says_how_to_create_it(descriptor):
    # WHEN a trainer connects to an experiment with no descriptor
    with pytest.raises(ExperimentNotFoundError) as caught:
        RolloutClient.for_experiment("nope")

    # THEN the message names the experiment and how to create it
    assert "'nope'" in str(caught.value) and "cdk deploy -c experiment=nope" in str(caught.value)


def test_experiment_without_queues_says_how_to_create_it(descriptor):
    with pytest.raises(ExperimentNotFoundError, match="no SQS queue agentcore-rollouts-other-dispatch"):
        RolloutClient(descriptor.runtime_arn, descriptor.results_bucket, "other")


def test_close_fails_pending_futures_with_client_closed_error(descriptor, backend, fast_poll):
    # GIVEN a pending rollout
    client = RolloutClient.from_descriptor(descriptor, poll=fast_poll)
    future = client.invoke({})

    # WHEN the client closes
    client.close()

    # THEN the future fails clearly and the client refuses new work
    with pytest.raises(ClientClosedError):
        future.result(0)
    with pytest.raises(ClientClosedError):
        client.invoke({})


def test_for_experiment_reads_the_descriptor_from_ssm(descriptor, backend, fast_poll):
    # WHEN a client is built from the experiment name alone
    with RolloutClient.for_experiment(descriptor.exp_id, ssm=aws("ssm"), poll=fast_poll) as client:
        future = client.invoke({})
        backend.serve(1)

        # THEN it uses the published queues and bucket
        assert client.dispatch_queue_url == descriptor.dispatch_queue_url
        assert future.result(5).s3_bucket == descriptor.results_bucket
