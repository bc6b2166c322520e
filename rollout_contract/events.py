"""S3 "Object Created" events as EventBridge delivers them, in AWS's shape and in moto's.

moto differs from AWS (``eTag`` for ``etag``, one constant event ``id``, ``reason`` values), so the
parser reads only what both agree on, and :attr:`ObjectCreated.dedupe_key` never uses the event id.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple

from rollout_contract.keys import ResultKey, parse_result_key

OBJECT_CREATED = "Object Created"
S3_SOURCE = "aws.s3"


class NotAnObjectCreatedEventError(ValueError):
    """The event is not an S3 "Object Created" event from EventBridge."""


class ObjectCreated(NamedTuple):
    """The facts of one S3 "Object Created" event."""

    bucket: str
    key: str
    size: int | None = None
    etag: str | None = None
    version_id: str | None = None

    @property
    def dedupe_key(self) -> str:
        """Identity of the object version: bucket + key (+ version). Never the event id."""
        base = f"{self.bucket}/{self.key}"
        return f"{base}?versionId={self.version_id}" if self.version_id else base

    @property
    def result_key(self) -> ResultKey:
        """The ids in the object's key (raises ``InvalidIdError`` for keys outside the layout)."""
        return parse_result_key(self.key)


def parse_object_created(event: Mapping[str, Any] | str | bytes) -> ObjectCreated:
    """Parse an EventBridge S3 "Object Created" event (a dict, or its JSON as an SQS body).

    Raises:
        NotAnObjectCreatedEventError: the event is something else, or lacks bucket name or key.
    """
    if isinstance(event, str | bytes):
        try:
            event = json.loads(event)
        except json.JSONDecodeError as exc:
            raise NotAnObjectCreatedEventError(f"event is not JSON: {exc}") from exc
    if not isinstance(event, Mapping):
        raise NotAnObjectCreatedEventError(f"event must be a JSON object, got {type(event).__name__}")
    if event.get("source") != S3_SOURCE or event.get("detail-type") != OBJECT_CREATED:
        raise NotAnObjectCreatedEventError(
            f"expected source {S3_SOURCE!r} and detail-type {OBJECT_CREATED!r}, got "
            f"{event.get('source')!r} / {event.get('detail-type')!r}"
        )
    detail = event.get("detail") or {}
    bucket = (detail.get("bucket") or {}).get("name")
    obj = detail.get("object") or {}
    key = obj.get("key")
    if not bucket or not key:
        raise NotAnObjectCreatedEventError("event detail lacks bucket.name or object.key")
    size = obj.get("size")
    return ObjectCreated(
        bucket=bucket,
        key=key,
        size=int(size) if size is not None else None,
        etag=obj.get("etag") or obj.get("eTag"),
        version_id=obj.get("version-id") or obj.get("versionId"),
    )
