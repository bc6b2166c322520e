"""The ``_rollout`` block and the dispatch-queue messages."""

from __future__ import annotations

import json

import pydantic
import pytest

from rollout_contract import (
    CancelRequest,
    DispatchRequest,
    InvalidIdError,
    MissingRolloutFieldsError,
    RolloutSpec,
    parse_dispatch_message,
)
from rollout_contract.messages import processing_response

SESSION = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"


def test_save_target_needs_all_three_fields_or_none():
    assert RolloutSpec.from_payload({}).save_target() is None
    assert RolloutSpec.from_payload({"_rollout": {"base_url": "http://m"}}).save_target() is None
    full = {"_rollout": {"exp_id": "e", "input_id": "i", "s3_bucket": "b"}}
    assert RolloutSpec.from_payload(full).save_target() == ("e", "i", "b")


def test_partial_save_target_names_every_missing_field():
    spec = RolloutSpec.from_payload({"_rollout": {"input_id": "i"}})

    missing = "Missing required rollout config field.*missing exp_id, s3_bucket"
    with pytest.raises(MissingRolloutFieldsError, match=missing):
        spec.save_target()


def test_rollout_block_that_is_not_an_object_is_refused():
    with pytest.raises(MissingRolloutFieldsError, match="must be an object, got list"):
        RolloutSpec.from_payload({"_rollout": [1]})


def test_rollout_block_keeps_unknown_fields_and_reads_dispatch_times():
    spec = RolloutSpec.from_payload({"_rollout": {"custom": 3, "submitted_at": 10, "dispatched_at": 12.5}})

    assert spec.model_extra == {"custom": 3}
    assert (spec.submitted_at, spec.dispatched_at) == (10.0, 12.5)


def test_save_target_validates_ids():
    spec = RolloutSpec(exp_id="runs//x", input_id="i", s3_bucket="b")

    with pytest.raises(InvalidIdError, match="exp_id"):
        spec.save_target()


def test_save_target_takes_the_labels_art_writes_under():
    # ART 0.2.0's evaluate.py default and its AgentCoreS3Session's '<prefix>/<experiment>' form
    for exp_id in ("gsm8k_eval", "runs/qwen3_gsm8k"):
        assert RolloutSpec(exp_id=exp_id, input_id="i", s3_bucket="b").save_target() == (exp_id, "i", "b")


def test_processing_response_has_the_location_only_when_saving():
    assert processing_response() == {"status": "processing"}
    assert processing_response("b", "e/i/s.json") == {
        "status": "processing",
        "s3_bucket": "b",
        "result_key": "e/i/s.json",
    }


def test_dispatch_request_round_trips_and_builds_the_agent_payload():
    request = DispatchRequest(
        exp_id="exp-1",
        input_id="q-1",
        session_id=SESSION,
        payload={"prompt": "2+2"},
        rollout={"model_id": "m"},
        submitted_at=100.0,
        timeout_s=60,
    )

    parsed = parse_dispatch_message(request.to_body())
    agent_payload = parsed.invoke_payload(parsed.payload, "bucket-1")

    assert parsed == request
    assert (parsed.start_by, parsed.deadline_at, parsed.run_deadline(200.0)) == (3700.0, 3760.0, 260.0)
    assert agent_payload["_rollout"] == {"model_id": "m", "exp_id": "exp-1", "input_id": "q-1", "s3_bucket": "bucket-1"}
    assert RolloutSpec.from_payload(agent_payload).save_target() == ("exp-1", "q-1", "bucket-1")


def test_cancel_request_is_told_apart_from_a_start():
    message = CancelRequest(exp_id="exp-1", input_id="q-1", session_id=SESSION)

    assert isinstance(parse_dispatch_message(message.to_body()), CancelRequest)


_BASE = {"kind": "start", "exp_id": "exp-1", "input_id": "q", "session_id": SESSION, "timeout_s": 5}


@pytest.mark.parametrize(
    ("changes", "field"),
    [({"session_id": "short"}, "session_id"), ({"timeout_s": 0}, "timeout_s"), ({"kind": "stop"}, "kind")],
)
def test_malformed_dispatch_messages_are_rejected_naming_the_field(changes, field):
    with pytest.raises(pydantic.ValidationError, match=field):
        parse_dispatch_message(json.dumps(_BASE | changes))
