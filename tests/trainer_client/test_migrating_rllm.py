"""docs/migrating.md, "From rLLM's AgentCore backend": the page's overrides run as written, after ``install()``.

rLLM is not on PyPI: its types come from tests/stand_ins/rllm (or the real tree ``AGENTCORE_STAND_INS_RLLM``
names, see the README there). A scripted backend plays dispatcher and agent.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "stand_ins" / "rllm"))
from rllm_tree import rllm_paths  # noqa: E402

sys.path[:0] = rllm_paths()
import rllm.engine.remote_runtime as remote_runtime  # noqa: E402
from rllm.engine.remote_runtime import RemoteRuntimeConfig  # noqa: E402
from rllm_engine import SessionUrls, run_one  # noqa: E402
from trainer_support import Backend, create_experiment  # noqa: E402

from trainer_client.backends import rllm as backend_rllm  # noqa: E402

GUIDE = Path(__file__).parents[2] / "docs" / "migrating.md"
PREFIX = "rllm.remote_runtime."


def _overrides_after() -> dict[str, str]:
    """The guide's overrides after the move: its diff's kept and added lines, as ``key -> value``."""
    text = GUIDE.read_text()
    block = re.search(r"<!-- test: from-rllm-overrides -->\n```diff\n(.*?)```", text, re.DOTALL)
    assert block is not None, "docs/migrating.md lost its tested rLLM overrides block"
    lines = [line[1:] for line in block.group(1).splitlines() if line[:1] in (" ", "+")]
    return dict(line.strip().lstrip("+").split("=", 1) for line in lines)


def _config(overrides: dict[str, str]) -> RemoteRuntimeConfig:
    """What rLLM's Hydra config holds for ``overrides`` (its values typed as Hydra types them)."""

    def typed(value: str) -> Any:
        return {"true": True, "false": False}.get(value, int(value) if value.isdigit() else value)

    fields: dict[str, Any] = {"agentcore": {}}
    for key, value in overrides.items():
        assert key.startswith(PREFIX), key
        path = key[len(PREFIX) :].split(".")
        target = fields["agentcore"] if path[0] == "agentcore" else fields
        target[path[-1]] = typed(value)
    return RemoteRuntimeConfig(**fields)


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Step 1: ``install()`` (everything it changes is restored afterwards)."""
    monkeypatch.setattr(remote_runtime, "create_remote_runtime", remote_runtime.create_remote_runtime)
    for name in ("RAY_RUNTIME_ENV_HOOK", backend_rllm._PREVIOUS_RUNTIME_ENV_HOOK):
        monkeypatch.delenv(name, raising=False)
    backend_rllm.install()


async def test_the_guides_overrides_run_an_rllm_task_as_a_run_of_the_experiment(installed) -> None:
    # GIVEN the deployed experiment the guide names, and rLLM's config from the guide's overrides (step 2)
    overrides = _overrides_after()
    descriptor = create_experiment(overrides[f"{PREFIX}agentcore.experiment"])
    backend = Backend(descriptor)
    config = _config(overrides)
    # WHEN rLLM's factory builds its runtime (as rLLM's trainer does) and its engine runs one task
    runtime = remote_runtime.create_remote_runtime(config, exp_id="qwen3_gsm8k_grpo", model_id="policy")
    runtime.initialize()
    serving = backend.serve_in_thread(1)
    try:
        result, _, _ = await run_one(
            runtime, SessionUrls("http://gw"), {"reward": 0.5}, "gsm8k-17", config.session_timeout
        )
    finally:
        serving.join(timeout=30)
        runtime.shutdown()
    # THEN the rollout ran as run 'qwen3-grpo' of experiment 'gsm8k', and rLLM got its reward
    assert isinstance(runtime, backend_rllm.AgentCoreEventsRuntime)
    assert result.finished and result.reward == 0.5
    assert result.raw_result["result_key"].startswith("gsm8k/qwen3-grpo/gsm8k-17/")
    assert backend.requests[0].rollout["model_id"] == "policy"
    assert backend.requests[0].timeout_s == float(overrides[f"{PREFIX}session_timeout"])
    assert os.environ["RAY_RUNTIME_ENV_HOOK"] == "trainer_client.backends.rllm.ray_runtime_env"
