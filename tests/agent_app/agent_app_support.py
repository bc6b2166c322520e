"""Black-box helpers for the agent app tests: HTTP calls, ping polling, result reads, fake S3 clients."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from botocore.awsrequest import AWSResponse
from starlette.testclient import TestClient

from rollout_contract.protocol import SESSION_HEADER, PingStatus

BUCKET = "rollout-results"
EXP_ID = "exp-1"
INPUT_ID = "q-7"


def rollout_block(**extra: Any) -> dict[str, Any]:
    return {"exp_id": EXP_ID, "input_id": INPUT_ID, "s3_bucket": BUCKET, **extra}


def new_session() -> str:
    return str(uuid.uuid4())


def result_key_of(session_id: str) -> str:
    return f"{EXP_ID}/{INPUT_ID}/{session_id}.json"


def invoke(client: TestClient, payload: Any, session_id: str | None = None):
    headers = {SESSION_HEADER: session_id} if session_id else {}
    return client.post("/invocations", content=json.dumps(payload), headers=headers)


def ping(client: TestClient) -> dict[str, Any]:
    response = client.get("/ping")
    assert response.status_code == 200
    return response.json()


def wait_until_healthy(client: TestClient, timeout_s: float = 10.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        body = ping(client)
        if body["status"] == PingStatus.HEALTHY:
            return body
        time.sleep(0.01)
    raise AssertionError(f"/ping still busy after {timeout_s}s")


def wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s}s")
        time.sleep(0.01)


def read_result(s3_client: Any, session_id: str) -> dict[str, Any]:
    return json.loads(s3_client.get_object(Bucket=BUCKET, Key=result_key_of(session_id))["Body"].read())


def list_keys(s3_client: Any) -> list[str]:
    return [item["Key"] for item in s3_client.list_objects_v2(Bucket=BUCKET).get("Contents", [])]


class SlowS3:
    """An S3 client whose ``put_object`` waits for :attr:`release` before writing through."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.entered = threading.Event()
        self.release = threading.Event()

    def put_object(self, **kwargs: Any) -> Any:
        self.entered.set()
        assert self.release.wait(10), "test never released the write"
        return self._inner.put_object(**kwargs)


def failing_puts(client: Any, failures: int, *, code: str = "InternalError", status: int = 500) -> list[int]:
    """Make the first ``failures`` PutObject requests of a real boto3 ``client`` answer ``status``/``code`` before
    they reach S3 (botocore's retries see them as S3's answers); returns the list of attempts, one entry each."""
    attempts: list[int] = []
    error = f"<Error><Code>{code}</Code><Message>injected</Message></Error>".encode()

    def before_send(request: Any, **_: Any) -> AWSResponse | None:
        attempts.append(1)
        if len(attempts) > failures:
            return None
        # botocore hands the request to every before-send handler: moto's must not find (and store) it.
        request.url = "https://failing.invalid/"
        return AWSResponse(request.url, status, {}, _Raw(error))

    client.meta.events.register_first("before-send.s3.PutObject", before_send)
    return attempts


class _Raw:
    """The raw body of a made-up response."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Any:
        yield self._body
