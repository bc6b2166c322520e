"""The local stack the verl and slime end-to-end tests share: the multi-turn agent behind the real gateway."""

from __future__ import annotations

import asyncio
import functools
import sys
import time
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from local_stack.gateway import admin_auth
from local_stack.stack import LocalStack, StackSettings
from rollout_contract import RolloutResult, Status
from trainer_client import PollSettings, RolloutClient
from trainer_client.backends import _shared

TESTS = Path(__file__).parents[1]
sys.path.insert(0, str(TESTS / "e2e"))

from e2e_support import AGENT_PRELOAD, EMULATOR_MAX_PAYLOAD  # noqa: E402

MULTITURN_AGENT = Path(__file__).parent / "agents" / "multiturn_agent.py"
#: A payload field bigger than the emulator accepts: the rollout ends as ``dispatch_failed``.
TOO_BIG = "x" * (EMULATOR_MAX_PAYLOAD + 1024)


@contextmanager
def multiturn_stack(run_dir: Path, experiment: str) -> Iterator[LocalStack]:
    """Moto, the ACR emulator running the multi-turn agent, workers (sweeping every second), model, gateway;
    its environment set for clients while it runs."""
    stack = LocalStack(
        StackSettings(
            run_dir=run_dir,
            experiments=(experiment,),
            agent_command=(sys.executable, str(MULTITURN_AGENT)),
            sweep_interval_s=1.0,
            runtime_options={"preload": (*AGENT_PRELOAD, "httpx")},
            emulator_options={"max_payload_bytes": EMULATOR_MAX_PAYLOAD},
        )
    )
    with stack as running, pytest.MonkeyPatch.context() as env:
        for name, value in running.env.items():
            env.setenv(name, value)
        yield running


def multiturn_fixtures(experiment: str) -> tuple[Any, Any]:
    """A test module's ``stack`` (module-scoped :func:`multiturn_stack`) and ``client`` (:func:`shared_test_client`)
    fixtures for ``experiment``: ``stack, client = multiturn_fixtures(EXP)``."""

    @pytest.fixture(scope="module")
    def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
        with multiturn_stack(tmp_path_factory.mktemp("stack"), experiment) as running:
            yield running

    @pytest.fixture
    def client(stack: LocalStack) -> Iterator[RolloutClient]:
        with shared_test_client(experiment) as shared:
            yield shared

    return stack, client


@contextmanager
def shared_test_client(experiment: str) -> Iterator[RolloutClient]:
    """The process-wide client the adapters use, with a short long-poll so tests end quickly."""
    factory = functools.partial(RolloutClient.for_experiment, poll=PollSettings(wait_time_s=1, deadline_grace_s=30))
    try:
        yield _shared.shared_client(experiment, factory=factory)
    finally:
        _shared.close_shared_clients()


def gateway_traces(stack: LocalStack, session_id: str) -> list[dict]:
    """What the gateway recorded for a session, read over its HTTP API."""
    auth = admin_auth(str(stack.moto_url), stack.settings.experiments[0])  # trace reads need the admin key (D100)
    return httpx.get(f"{stack.gateway_url}/sessions/{session_id}/traces", timeout=10, auth=auth).json()


async def cancel_once_submitted(client: RolloutClient, work: Awaitable[object]) -> list[RolloutResult]:
    """Run ``work`` (a framework's call that runs one long rollout), cancel it once the rollout is submitted,
    and return the experiment's ``cancelled`` results once there is one (60 s at most)."""
    task = asyncio.ensure_future(work)
    while client.pending_count == 0:
        await asyncio.sleep(0.1)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    else:
        raise AssertionError("the cancelled call returned instead of raising CancelledError")
    deadline = time.monotonic() + 60
    while not (cancelled := list(client.results(statuses=[Status.CANCELLED]))):
        assert time.monotonic() < deadline, "no cancelled result within 60 s"
        await asyncio.sleep(1)
    return cancelled
