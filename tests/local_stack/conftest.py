"""Real processes on 127.0.0.1 for the local-stack tests: a moto server, the stand-in model, the gateway."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from local_stack._process import ManagedProcess
from local_stack.gateway import gateway_process
from local_stack.model_endpoint.process import model_endpoint_process
from local_stack.moto_server import moto_process
from local_stack.provision import AwsClients

HERE = Path(__file__).parent
READY_TIMEOUT_S = 30.0


def _running(process: ManagedProcess) -> Iterator[ManagedProcess]:
    process.start()
    try:
        process.wait_ready(READY_TIMEOUT_S)
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="session")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedProcess]:
    """A moto server process shared by the session (tests use distinct experiment ids)."""
    yield from _running(moto_process(tmp_path_factory.mktemp("moto") / "moto.log", os.environ))


@pytest.fixture(scope="session")
def aws(moto: ManagedProcess) -> AwsClients:
    """boto3 clients pointed at the moto server."""
    assert moto.url is not None
    return AwsClients.local(moto.url)


@pytest.fixture(scope="session")
def model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedProcess]:
    """The stand-in model process (no simulated latency, seed 0)."""
    yield from _running(model_endpoint_process(run_dir=tmp_path_factory.mktemp("model"), base_env=os.environ))


@pytest.fixture(scope="session")
def gateway(model: ManagedProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedProcess]:
    """The token gateway process in front of the stand-in model."""
    process = gateway_process(
        model_base_url=f"{model.url}/v1", run_dir=tmp_path_factory.mktemp("gateway"), base_env=os.environ
    )
    yield from _running(process)
