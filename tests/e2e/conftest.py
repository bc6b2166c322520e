"""End-to-end fixtures: a local stack per test module, and a trainer client per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from e2e_support import EMULATOR_MAX_PAYLOAD, EXP, connect, scripted_stack, serving

from local_stack.stack import LocalStack
from trainer_client import RolloutClient


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """The local stack for experiment ``e2e``, shared by a test module; its environment set for clients."""
    stack = scripted_stack(
        tmp_path_factory.mktemp("stack"), EXP, emulator_options={"max_payload_bytes": EMULATOR_MAX_PAYLOAD}
    )
    with serving(stack) as running:
        yield running


@pytest.fixture
def client(stack: LocalStack) -> Iterator[RolloutClient]:
    """A trainer client of experiment ``e2e``."""
    with connect(stack) as rollout_client:
        yield rollout_client
