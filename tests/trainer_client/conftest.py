"""Fixtures of the trainer tests: one moto server per test session (per xdist worker), reset before each test.

Cheaper than starting moto's in-process mock for every test, and the clients talk HTTP to it as they do to AWS.
The helpers the tests import are in ``trainer_support.py`` (a name no other test directory uses).
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from moto.server import ThreadedMotoServer
from trainer_support import FAST_POLL, REGION, Backend, create_experiment

from rollout_contract import ExperimentDescriptor
from trainer_client import PollSettings, RolloutClient


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    """A moto server on a free port for the whole session."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch, moto_url: str) -> Iterator[None]:
    """Point boto3 at the session's moto server, emptied for this test."""
    for name in (
        "AWS_PROFILE",
        "AWS_ENDPOINT_URL_SQS",
        "AWS_ENDPOINT_URL_S3",
        "AWS_ENDPOINT_URL_SSM",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_url)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    httpx.post(f"{moto_url}/moto-api/reset", timeout=30, trust_env=False).raise_for_status()
    yield


@pytest.fixture
def descriptor() -> ExperimentDescriptor:
    return create_experiment()


@pytest.fixture
def fast_poll() -> PollSettings:
    return FAST_POLL


@pytest.fixture
def backend(descriptor: ExperimentDescriptor) -> Backend:
    return Backend(descriptor)


@pytest.fixture
def client(descriptor: ExperimentDescriptor) -> Iterator[RolloutClient]:
    with RolloutClient.from_descriptor(descriptor, poll=FAST_POLL) as client:
        yield client
