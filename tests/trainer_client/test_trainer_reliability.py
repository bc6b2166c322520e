"""Futures that must not hang: bad timeouts, reused session ids, a journal of unsent requests, a store gone."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest
from botocore.exceptions import EndpointConnectionError
from trainer_support import aws

from rollout_contract import DispatchRequest, Status
from trainer_client import (
    DuplicateSessionError,
    PollSettings,
    RolloutClient,
    StoreUnavailableError,
    SubmitError,
    read_journal,
)
from trainer_client._journal import Journal

SESSION = "reliability-session-0000000000000000001"


@pytest.mark.parametrize("timeout", [math.inf, -math.inf, math.nan, "30", 0, -1, True, None])
def test_a_timeout_that_is_not_a_finite_positive_number_is_refused_before_anything_is_sent(client, backend, timeout):
    with pytest.raises(ValueError, match="timeout"):
        client.invoke({"q": 1}, timeout=timeout)
    assert client.pending_count == 0
    assert backend.sqs.receive_message(QueueUrl=backend.descriptor.dispatch_queue_url).get("Messages") is None


@pytest.mark.parametrize(
    ("payload", "named"),
    [
        ({"q": math.nan}, "payload['q']"),
        ({"rows": [1, {"x": math.inf}]}, "payload['rows'][1]['x']"),
        ({"when": object()}, "payload['when']"),
        ({"s": {1, 2}}, "payload['s']"),
        ({"_rollout": "not an object"}, "payload['_rollout']"),
    ],
)
def test_a_payload_value_json_cannot_carry_is_refused_naming_the_field(client, payload, named):
    with pytest.raises((TypeError, ValueError)) as raised:
        client.invoke(payload)
    assert named in str(raised.value)
    assert client.pending_count == 0


def test_a_session_id_pending_in_the_client_is_refused_on_submit(client, backend):
    client.invoke({"q": 1}, session_id=SESSION)
    with pytest.raises(DuplicateSessionError, match="already pending"):
        client.invoke({"q": 2}, session_id=SESSION)
    with pytest.raises(DuplicateSessionError):
        client.submit([({"q": 1}, None), ({"q": 2}, None)], session_ids=[SESSION + "x", SESSION + "x"])
    assert len(backend.serve(1)) == 1


def test_a_session_id_reused_after_it_ended_is_refused_by_the_same_client(client, backend):
    future = client.invoke({"q": 1}, session_id=SESSION)
    backend.serve(1)
    assert future.result(timeout=10).status is Status.SUCCEEDED
    with pytest.raises(DuplicateSessionError, match="ended"):
        client.invoke({"q": 1}, session_id=SESSION)


def test_a_session_id_reused_by_a_new_client_resolves_with_the_stored_result(descriptor, backend, fast_poll):
    with RolloutClient.from_descriptor(descriptor, poll=fast_poll) as first:
        future = first.invoke({"q": 1}, session_id=SESSION, input_id="q-1")
        backend.serve(1)
        original = future.result(timeout=10)
    with RolloutClient.from_descriptor(descriptor, poll=fast_poll) as second:
        again = second.invoke({"q": 1}, session_id=SESSION, input_id="q-1")
        assert again.result(timeout=1).session_id == original.session_id
    assert backend.sqs.receive_message(QueueUrl=descriptor.dispatch_queue_url).get("Messages") is None


def _killed_mid_submit(descriptor, journal: Path, count: int, sent: int) -> list[DispatchRequest]:
    """Write what a trainer killed after journaling ``count`` requests and sending the first ``sent`` leaves."""
    requests = [
        DispatchRequest(
            exp_id=descriptor.exp_id, input_id=f"q-{i}", session_id=f"{SESSION}-{i}", payload={}, timeout_s=60
        )
        for i in range(count)
    ]
    writer = Journal(journal)
    writer.record(requests)
    sqs = aws("sqs")
    for request in requests[:sent]:
        sqs.send_message(QueueUrl=descriptor.dispatch_queue_url, MessageBody=request.to_body())
    writer.mark_sent(request.key for request in requests[:sent])
    return requests


def test_attach_journal_resends_requests_it_cannot_prove_were_sent(descriptor, backend, fast_poll, tmp_path):
    journal = tmp_path / "journal.jsonl"
    requests = _killed_mid_submit(descriptor, journal, count=10, sent=3)
    with RolloutClient.from_descriptor(descriptor, poll=fast_poll) as resumed:
        futures = resumed.attach_journal(journal)
        served = backend.serve(10)
        results = [future.result(timeout=10) for future in futures]
    assert sorted(r.session_id for r in served) == sorted(r.session_id for r in requests)
    assert [r.session_id for r in results] == [r.session_id for r in requests]
    # the resent messages are the journaled ones: same submit time, so the same deadline
    by_id = {r.session_id: r for r in served}
    assert all(by_id[r.session_id].submitted_at == r.submitted_at for r in requests)
    assert read_journal(journal) == [r.key for r in requests]


def test_attach_journal_fails_refused_requests_at_once(descriptor, fast_poll, tmp_path):
    journal = tmp_path / "journal.jsonl"
    requests = _killed_mid_submit(descriptor, journal, count=2, sent=1)
    Journal(journal).mark_refused([requests[1].key])
    with RolloutClient.from_descriptor(descriptor, poll=fast_poll) as resumed:
        futures = resumed.attach_journal(journal)
        assert isinstance(futures[1].exception(timeout=1), SubmitError)
        assert not futures[0].done()


def test_submit_journals_each_request_before_sending_and_marks_it_sent(client, backend, tmp_path):
    journal = tmp_path / "journal.jsonl"
    client.submit([({"q": i}, f"q-{i}") for i in range(3)], journal=journal)
    lines = [json.loads(line) for line in journal.read_text().splitlines()]
    assert [("request" in line) for line in lines[:3]] == [True] * 3
    assert sorted(k for line in lines[3:] for k in line["sent"]) == sorted(line["result_key"] for line in lines[:3])
    backend.serve(3)


def test_a_journal_in_a_missing_directory_is_refused_before_sending(client, backend, tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        client.submit([({"q": 1}, None)], journal=tmp_path / "missing" / "journal.jsonl")
    assert client.pending_count == 0


class _Unreachable:
    """An SQS client whose every call fails as when the endpoint is gone."""

    def __init__(self) -> None:
        self.calls = 0

    def __getattr__(self, name: str):
        def call(**_: object) -> None:
            self.calls += 1
            raise EndpointConnectionError(endpoint_url="http://127.0.0.1:1")

        return call


def test_pending_futures_fail_after_the_store_is_gone_for_the_allowed_time_and_it_is_logged_once(descriptor, caplog):
    poll = PollSettings(wait_time_s=1, unavailable_after_s=2.0)
    with RolloutClient.from_descriptor(descriptor, poll=poll) as client:
        future = client.invoke({"q": 1})
        unreachable = _Unreachable()
        client._poller._sqs = unreachable  # the queue goes away after the submit
        with caplog.at_level(logging.WARNING, logger="trainer_client"):
            error = future.exception(timeout=30)
    assert isinstance(error, StoreUnavailableError)
    assert "unreachable" in str(error)
    warnings = [r for r in caplog.records if "cannot reach" in r.getMessage()]
    assert len(warnings) == 1
    assert not any(r.exc_info for r in caplog.records)
    assert unreachable.calls <= 4  # backed off: 1 s, 2 s, ... not once a second


def test_the_queue_timeout_travels_with_each_request_and_bounds_the_future_deadline(descriptor, backend, fast_poll):
    with RolloutClient.from_descriptor(descriptor, poll=fast_poll, queue_timeout=120) as client:
        future = client.invoke({"q": 1}, timeout=30)
        (request,) = backend.serve(1)
        assert (request.timeout_s, request.queue_timeout_s) == (30, 120)
        assert future.deadline_at == request.submitted_at + 150
        future.result(timeout=10)
    with pytest.raises(ValueError, match="queue_timeout"):
        RolloutClient.from_descriptor(descriptor, queue_timeout=math.inf)
