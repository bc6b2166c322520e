"""``/ping`` transitions, handler kinds and the request context of ``AgentCoreRLApp``."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from agent_app_support import (
    SlowS3,
    invoke,
    list_keys,
    new_session,
    ping,
    read_result,
    result_key_of,
    rollout_block,
    wait_for,
    wait_until_healthy,
)

from rollout_contract.protocol import PingStatus
from rollout_contract.results import RolloutResult, Status


def test_ping_is_busy_while_handler_runs_and_while_result_is_written_then_healthy(make_client, s3):
    # GIVEN a handler that blocks until released, and an S3 client that blocks its write until released
    handler_release, handler_returned = threading.Event(), threading.Event()

    def handler(payload):
        handler_release.wait(10)
        handler_returned.set()
        return {"rewards": 1.0}

    slow_s3 = SlowS3(s3)
    client = make_client(handler, s3_client=slow_s3)
    session_id = new_session()
    idle = ping(client)

    # WHEN a rollout runs through its handler and its write
    invoke(client, {"_rollout": rollout_block()}, session_id)
    during_handler = ping(client)
    handler_release.set()
    assert slow_s3.entered.wait(10)
    during_write = ping(client)
    write_pending = list_keys(s3)
    slow_s3.release.set()
    after = wait_until_healthy(client)

    # THEN /ping is Healthy, HealthyBusy (handler), HealthyBusy (write, handler already returned), Healthy
    assert idle["status"] == PingStatus.HEALTHY
    assert during_handler["status"] == PingStatus.HEALTHY_BUSY
    assert handler_returned.is_set() and write_pending == []
    assert during_write["status"] == PingStatus.HEALTHY_BUSY
    assert after["status"] == PingStatus.HEALTHY
    assert RolloutResult(read_result(s3, session_id)).status is Status.SUCCEEDED


def test_time_of_last_update_moves_only_on_status_transitions(make_client):
    # GIVEN an idle app and a handler that blocks until released
    release = threading.Event()
    client = make_client(lambda payload: release.wait(10) and {"rewards": 1.0})
    first_idle, second_idle = ping(client), ping(client)

    # WHEN a rollout starts (after a moment, so a moving clock would show) and then ends
    time.sleep(1.05)
    invoke(client, {"_rollout": rollout_block()}, new_session())
    busy_1, busy_2 = ping(client), ping(client)
    release.set()
    healthy = wait_until_healthy(client)

    # THEN the timestamp is stable within a status and moves forward at each transition
    assert first_idle["time_of_last_update"] == second_idle["time_of_last_update"]
    assert busy_1["time_of_last_update"] == busy_2["time_of_last_update"]
    assert busy_1["time_of_last_update"] > first_idle["time_of_last_update"]
    assert healthy["time_of_last_update"] >= busy_1["time_of_last_update"]
    assert ping(client)["time_of_last_update"] == healthy["time_of_last_update"]


def _sync_handler(payload):
    return {"rewards": 1.0, "kind": "sync"}


async def _async_handler(payload):
    await asyncio.sleep(0)
    return {"rewards": 1.0, "kind": "async"}


@pytest.mark.parametrize(("handler", "kind"), [(_sync_handler, "sync"), (_async_handler, "async")])
def test_sync_and_async_handlers_both_store_their_result(make_client, s3, handler, kind):
    # GIVEN a sync or an async handler
    client = make_client(handler)
    session_id = new_session()

    # WHEN it runs
    invoke(client, {"_rollout": rollout_block()}, session_id)
    wait_until_healthy(client)

    # THEN its dict is stored
    assert read_result(s3, session_id)["kind"] == kind


def test_async_handler_does_not_block_ping(make_client):
    # GIVEN an async handler that blocks its event loop (bad practice, but it happens)
    release = threading.Event()

    async def handler(payload):
        release.wait(10)
        return {"rewards": 1.0}

    client = make_client(handler)

    # WHEN it runs
    invoke(client, {"_rollout": rollout_block()}, new_session())
    started = time.monotonic()
    busy = ping(client)
    elapsed = time.monotonic() - started
    release.set()

    # THEN /ping still answers at once, busy
    assert busy["status"] == PingStatus.HEALTHY_BUSY
    assert elapsed < 1.0
    wait_until_healthy(client)


@pytest.mark.parametrize("is_async", [False, True])
def test_handler_taking_context_gets_the_session_id_from_the_header(make_client, is_async):
    # GIVEN a handler declared as (payload, context)
    seen: dict[str, Any] = {}

    def sync_handler(payload, context):
        seen["session_id"] = context.session_id
        return {"rewards": 1.0}

    async def async_handler(payload, context):
        return sync_handler(payload, context)

    client = make_client(async_handler if is_async else sync_handler)
    session_id = new_session()

    # WHEN it is invoked with a session header
    invoke(client, {"_rollout": rollout_block()}, session_id)
    wait_until_healthy(client)

    # THEN the context carries that session id
    assert seen["session_id"] == session_id


def test_missing_session_header_gets_a_random_uuid_used_for_key_and_context(make_client, s3):
    # GIVEN a handler declared as (payload, context)
    seen: dict[str, Any] = {}
    client = make_client(lambda payload, context: seen.update(session_id=context.session_id) or {"rewards": 1.0})

    # WHEN it is invoked without a session header
    response = invoke(client, {"_rollout": rollout_block()})
    wait_until_healthy(client)

    # THEN a fresh uuid names the session in the answer, the context and the stored key
    session_id = seen["session_id"]
    assert len(session_id) == 36
    assert response.json()["result_key"] == result_key_of(session_id)
    wait_for(lambda: list_keys(s3) == [result_key_of(session_id)])
