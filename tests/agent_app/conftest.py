"""Fixtures for the agent app: moto S3 in-process and an app factory."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from agent_app_support import BUCKET
from moto import mock_aws
from starlette.testclient import TestClient

from agent_app import AgentCoreRLApp


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)


@pytest.fixture
def s3(aws_env: None, boto_session: boto3.Session) -> Iterator[Any]:
    with mock_aws():
        client = boto_session.client("s3")
        client.create_bucket(Bucket=BUCKET)
        yield client


@pytest.fixture
def make_client(s3: Any) -> Iterator[Callable[..., TestClient]]:
    """Build an app around a handler and return a started ``TestClient`` (closed at teardown)."""
    clients: list[TestClient] = []

    def make(handler: Callable[..., Any], *, s3_client: Any = None, **app_kwargs: Any) -> TestClient:
        app = AgentCoreRLApp(s3_client=s3_client or s3, **app_kwargs)
        app.rollout_entrypoint(handler)
        client = TestClient(app)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()
