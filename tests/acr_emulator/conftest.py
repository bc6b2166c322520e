"""Fixtures: real emulator servers on OS-chosen ports, driven through boto3 ``bedrock-agentcore`` clients."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from acr_helpers import MAX_PAYLOAD_BYTES, SECRET_ENV, SHARED_RUNTIMES, client_for

from local_stack.acr_emulator import EmulatorConfig, EmulatorProcess, start_emulator
from rollout_contract import new_session_id


@pytest.fixture(scope="session")
def emulator() -> Iterator[EmulatorProcess]:
    """One emulator hosting every shared test runtime, with secrets in its own environment."""
    config = EmulatorConfig(runtimes=SHARED_RUNTIMES, max_active_sessions=100, max_payload_bytes=MAX_PAYLOAD_BYTES)
    with start_emulator(config, env={**os.environ, **SECRET_ENV}) as running:
        yield running


@pytest.fixture
def make_client() -> Iterator[Callable[..., Any]]:
    """Build boto3 clients (``client_for`` arguments) that are closed after the test."""
    clients = []

    def make(url: str | None, **config: object) -> Any:
        clients.append(client_for(url, **config))
        return clients[-1]

    yield make
    for made in clients:
        made.close()


@pytest.fixture
def client(emulator: EmulatorProcess, make_client: Callable[..., Any]) -> Any:
    """A boto3 client pointed at the shared emulator."""
    return make_client(emulator.url)


@pytest.fixture
def session_id() -> str:
    """A fresh session id."""
    return new_session_id()
