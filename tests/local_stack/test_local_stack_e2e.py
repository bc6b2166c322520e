"""One rollout through the whole local stack: trainer -> dispatcher -> emulator -> agent -> S3 -> trainer."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from examples.math_agent.local import MATH_AGENT
from local_stack._process import group_alive
from local_stack.hosting import DEFAULT_MODEL_NAME
from local_stack.problems import generate_problems
from local_stack.stack import LocalStack

pytestmark = pytest.mark.e2e


def _agent_processes() -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if b"rl_app.py" in cmdline.read_bytes():
                found.append(cmdline.parent.name)
        except OSError:
            continue
    return found


def test_a_rollout_runs_end_to_end_with_token_traces_and_leaves_no_agent_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the local stack with the example agent, the real Lambda handlers and the stand-in model
    problem = generate_problems(1, seed=2)[0]
    agents_before = set(_agent_processes())
    with LocalStack(MATH_AGENT.settings(run_dir=tmp_path, experiments=("e2e-one",))) as stack:
        pgids = [p.pid for p in stack.processes]
        for name, value in stack.env.items():
            monkeypatch.setenv(name, value)
        from trainer_client import PollSettings, RolloutClient

        client = RolloutClient.for_experiment(
            "e2e-one",
            model_id=DEFAULT_MODEL_NAME,
            sampling_params={"temperature": 0},
            poll=PollSettings(wait_time_s=1),
        )
        # WHEN the trainer client invokes one rollout and waits for it
        future = client.invoke({"prompt": problem["prompt"], "answer": problem["answer"]}, timeout=60)
        result = future.result(timeout=60)
        trace_url = f"{stack.gateway_url}/sessions/{future.session_id}/traces"
        traces = httpx.get(trace_url, timeout=5, auth=client.gateway_auth).json()
        # AND the gateway refuses the same read without the trainer's admin key, and a model call without a key
        unauthenticated = httpx.get(trace_url, timeout=5).status_code
        model_call = httpx.post(f"{stack.gateway_url}/sessions/x/v1/chat/completions", json={}, timeout=5).status_code
        client.close()
    # THEN it succeeded with the full reward, its model calls were traced with tokens, and nothing is left running
    assert result.ok and result.reward == 1.0
    assert traces and all(t["completion_token_ids"] and t["logprobs"] for t in traces)
    assert (unauthenticated, model_call) == (401, 401)
    assert not any(group_alive(pgid) for pgid in pgids)
    assert set(_agent_processes()) <= agents_before
