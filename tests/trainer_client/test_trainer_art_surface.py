"""ART 0.2.0's client surface, where it meets Python's ``Future``: ``cancelled`` as a flag, the polling methods,
the client's attributes, ``run_batch``'s polling keywords and ``BatchResult``."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import CancelledError

import pytest
from trainer_support import BUCKET, EXP_ID, RUNTIME_ARN

from rollout_contract import CancelRequest
from trainer_client import AsyncBatchResult, BatchResult, RolloutClient, RolloutFuture


def test_cancelled_is_arts_flag_and_futures_method_at_once(client, backend):
    # GIVEN a rollout that finishes and one that is cancelled
    done = client.invoke({})
    backend.serve(1)
    done.result(timeout=5)
    cancelled = client.invoke({})

    # WHEN both are checked the ART way (a property) and the Future way (a method)
    assert cancelled.cancel()

    # THEN both agree, for ART's `if future.cancelled:` and for `future.cancelled()`
    assert not done.cancelled and done.cancelled() is False and done.cancelled == False  # noqa: E712
    assert cancelled.cancelled and cancelled.cancelled() is True and cancelled.cancelled == True  # noqa: E712


async def test_asyncio_sees_a_cancelled_future_as_cancelled(client):
    # GIVEN a cancelled rollout (asyncio.wrap_future calls source.cancelled())
    future = client.invoke({})
    future.cancel()

    # WHEN asyncio awaits it THEN it raises CancelledError as for any cancelled future
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wrap_future(future)
    with pytest.raises(CancelledError):
        await future.result_async()


async def test_cancel_async_and_done_async_as_arts_session_calls_them(client, backend):
    # GIVEN a running rollout
    future = await client.invoke_async({})
    assert await future.done_async() is False

    # WHEN ART's session shuts it down (AgentCoreS3Session.shutdown awaits cancel_async)
    assert await future.cancel_async() is True
    assert await future.cancel_async() is False

    # THEN the future is done and cancelled, and one cancel request went to the dispatcher
    assert await future.done_async() is True and future.cancelled
    assert [type(m) for m in backend.receive(2)] == [type(m) for m in backend.requests[:1]] + [CancelRequest]


def test_a_loop_written_for_arts_polling_finishes_without_spinning(client, backend):
    # GIVEN three rollouts and a loop shaped like ART's BatchResult (poll when ready, sleep until the next poll)
    futures = [client.invoke({"reward": float(i)}) for i in range(3)]
    backend.serve_in_thread(3)
    pending: list[RolloutFuture] = list(futures)
    sleeps = 0

    # WHEN it runs
    while pending:
        for future in [f for f in pending if f.ready_to_poll() and f.done()]:
            pending.remove(future)
        if pending:
            wait = min(f.time_until_next_poll() for f in pending)
            assert wait > 0  # a loop that sleeps only "if wait > 0", as ART's does, never spins
            time.sleep(wait)
            sleeps += 1

    # THEN every result is there and a done future asks for no wait
    assert sorted(f.result().reward for f in futures) == [0.0, 1.0, 2.0]
    assert all(f.time_until_next_poll() == 0.0 for f in futures)
    assert sleeps < 200


def test_the_client_has_arts_attributes(descriptor, monkeypatch):
    # GIVEN ART's constructor call, with a default region that is not the runtime's
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")

    # WHEN the client is made
    with RolloutClient(
        RUNTIME_ARN, BUCKET, EXP_ID, base_url="http://model/v1", model_id="m", sampling_params={"temperature": 0.5}
    ) as client:
        # THEN ART's attributes are there, the region (and every client's) taken from the ARN as ART does
        assert (client.agent_runtime_arn, client.s3_bucket, client.exp_id) == (RUNTIME_ARN, BUCKET, EXP_ID)
        assert (client.base_url, client.model_id) == ("http://model/v1", "m")
        assert client.extra_config == {"sampling_params": {"temperature": 0.5}}
        assert client.region == "us-east-1"
        assert client.s3_client.meta.region_name == "us-east-1"
        assert client.agentcore_client.meta.region_name == "us-east-1"
        assert client.agentcore_client.meta.service_model.service_name == "bedrock-agentcore"


def test_the_region_comes_from_the_arn_when_boto3_has_none(descriptor, monkeypatch):
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    monkeypatch.delenv("AWS_REGION", raising=False)

    with RolloutClient(RUNTIME_ARN, BUCKET, EXP_ID) as client:
        assert client.region == "us-east-1"


def test_run_batch_takes_arts_polling_keywords_and_logs_arts_status_line(client, backend, caplog):
    # GIVEN a batch called with ART's positional polling arguments and a short log_interval, served after 0.4 s
    caplog.set_level(logging.INFO, logger="trainer_client")
    batch = client.run_batch([{}, {}], 2, 60.0, 0.5, 30.0, 1.5, 0.1)

    def serve_late() -> None:
        time.sleep(0.4)
        backend.serve(2)

    # WHEN it runs
    threading.Thread(target=serve_late, daemon=True).start()
    items = list(batch)

    # THEN it is ART's BatchResult with ART's attributes, both items came, and the status line was logged
    assert isinstance(batch, BatchResult)
    assert (batch.max_concurrent, batch.timeout, batch.initial_interval, batch.max_interval) == (2, 60.0, 0.5, 30.0)
    assert (batch.backoff_factor, batch.log_interval) == (1.5, 0.1)
    assert len(items) == 2 and all(item.success for item in items)
    status_lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("[Status]")]
    assert status_lines and status_lines[0].startswith("[Status] 2 active, 0 done, elapsed: ")


async def test_run_batch_async_is_an_async_batch_result(client, backend):
    backend.serve_in_thread(2)

    batch = client.run_batch_async([{"reward": 1.0}, {"reward": 0.0}], 2, 60.0, initial_interval=1.0)

    assert isinstance(batch, AsyncBatchResult)
    assert sorted([item.result.reward async for item in batch]) == [0.0, 1.0]
