"""``rollouts demo`` end to end: the math agent through the whole local stack, with token traces."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from examples.math_agent.local import MATH_DEMO
from local_stack.demo import DemoSettings, run_demo
from trainer_client import FailurePolicy

pytestmark = pytest.mark.e2e


def test_the_demo_runs_grpo_groups_of_the_math_agent_and_writes_every_result(tmp_path: Path) -> None:
    # GIVEN a small demo: 3 problems x 2 samples, at temperature 0 (the stand-in policy makes no mistakes)
    output = tmp_path / "results.jsonl"
    settings = DemoSettings(
        prompts=3, samples_per_prompt=2, concurrency=6, temperature=0.0, policy=FailurePolicy.DROP_GROUP,
        run_dir=tmp_path / "stack", output=output,
    )  # fmt: skip
    # WHEN it runs
    printed = io.StringIO()
    report = run_demo(MATH_DEMO, settings, out=printed)
    # THEN every rollout succeeded with full reward, every group was kept, every session was stopped,
    # the token traces came back, and the results file holds one line per rollout
    assert report.by_status == {"succeeded": 6}
    assert report.rewards == [1.0] * 6
    assert report.groups_kept == 3 and report.groups_dropped == 0
    assert report.sessions_stopped == report.sessions_started == 6
    assert report.traced_rollouts == 6 and report.completion_tokens > 0
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    assert len({line["session_id"] for line in lines}) == 6
    assert all(line["token_traces"][0]["completion_token_ids"] for line in lines)
    assert "== demo summary ==" in printed.getvalue()
