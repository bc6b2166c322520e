"""S3 "Object Created" events in AWS's and moto's shapes."""

from __future__ import annotations

import json

import pytest

from rollout_contract import NotAnObjectCreatedEventError, ResultKey, parse_object_created

SESSION = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
KEY = f"exp-1/q-1/{SESSION}.json"


def _event(obj: dict, event_id: str = "17793124-05d4-b198-2fde-7ededc63b103") -> dict:
    return {
        "version": "0",
        "id": event_id,
        "detail-type": "Object Created",
        "source": "aws.s3",
        "detail": {"version": "0", "bucket": {"name": "bucket-1"}, "object": obj, "reason": "PutObject"},
    }


AWS_EVENT = _event({"key": KEY, "size": 412, "etag": "b1946ac9", "version-id": "v1", "sequencer": "00"})
MOTO_EVENT = _event({"key": KEY, "size": "412", "eTag": "b1946ac9"}, event_id="moto-constant-id")


def test_aws_shaped_event_is_parsed():
    created = parse_object_created(AWS_EVENT)

    assert (created.bucket, created.key, created.size, created.etag, created.version_id) == (
        "bucket-1",
        KEY,
        412,
        "b1946ac9",
        "v1",
    )
    assert created.result_key == ResultKey("exp-1", "q-1", SESSION)


def test_moto_shaped_event_with_etag_spelled_etag_camel_is_parsed_from_an_sqs_body():
    created = parse_object_created(json.dumps(MOTO_EVENT))

    assert (created.key, created.size, created.etag, created.version_id) == (KEY, 412, "b1946ac9", None)


def test_dedupe_key_ignores_the_event_id():
    first = parse_object_created(_event({"key": KEY}, event_id="a"))
    redelivered = parse_object_created(_event({"key": KEY}, event_id="b"))

    assert first.dedupe_key == redelivered.dedupe_key == f"bucket-1/{KEY}"
    assert parse_object_created(AWS_EVENT).dedupe_key == f"bucket-1/{KEY}?versionId=v1"


@pytest.mark.parametrize(
    ("event", "message"),
    [
        ("not json", "not JSON"),
        ("[1]", "JSON object"),
        ({**AWS_EVENT, "detail-type": "Object Deleted"}, "Object Deleted"),
        ({**AWS_EVENT, "source": "aws.sqs"}, "aws.sqs"),
        (_event({"size": 1}), "object.key"),
    ],
)
def test_other_events_are_rejected_saying_why(event, message):
    with pytest.raises(NotAnObjectCreatedEventError, match=message):
        parse_object_created(event)
