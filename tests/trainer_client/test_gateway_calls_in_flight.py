"""``trainer_client.gateway.CallsInFlight``: the count a settled trace read waits on."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("rllm_model_gateway")

from trainer_client.gateway import CallsInFlight  # noqa: E402


async def test_a_wait_for_a_session_ends_when_its_last_call_is_answered_and_ignores_other_sessions() -> None:
    # GIVEN two calls of session "a" and one of session "b" in flight
    calls = CallsInFlight()
    for session_id in ("a", "a", "b"):
        await calls.enter(session_id)
    waiter = asyncio.create_task(calls.wait_idle("a", timeout_s=30))
    # WHEN one call of "a" and the call of "b" are answered, the wait goes on
    await calls.leave("a")
    await calls.leave("b")
    await asyncio.sleep(0)
    assert not waiter.done() and calls.count("a") == 1
    # THEN the last call of "a" ends it, with nothing left in flight
    await calls.leave("a")
    assert await asyncio.wait_for(waiter, 5) == 0


async def test_a_wait_that_times_out_reports_the_calls_still_in_flight() -> None:
    # GIVEN a call that never ends
    calls = CallsInFlight()
    await calls.enter("a")
    # WHEN a read waits no time THEN it reports the call in flight; an unknown session has none
    assert await calls.wait_idle("a", timeout_s=0) == 1
    assert await calls.wait_idle("other", timeout_s=0) == 0


async def test_a_sessions_trace_writes_are_the_ones_started_during_its_calls_and_leave_once_done() -> None:
    # GIVEN a write started during a call of session "a" and one during a call of session "b", both pending
    calls = CallsInFlight()
    loop = asyncio.get_running_loop()
    write_a, write_b = loop.create_future(), loop.create_future()
    for session_id, write in (("a", write_a), ("b", write_b)):
        await calls.enter(session_id)
        await calls.leave(session_id, [write])
    # WHEN a settled read of "a" asks which writes to wait for THEN it is "a"'s alone (a batch always has other
    # sessions' writes pending), and a finished write is forgotten
    assert calls.writes("a") == [write_a] and calls.writes("b") == [write_b]
    write_a.set_result(None)
    await asyncio.sleep(0)
    assert calls.writes("a") == [] and calls.writes("b") == [write_b]
