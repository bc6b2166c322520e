"""The coding agent through the whole local stack, hosted by ``rollouts demo --agent`` as its README says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from local_stack.stack import PROJECT_ROOT
from trainer_client._cli import main

pytestmark = pytest.mark.e2e

EXAMPLE = PROJECT_ROOT / "examples" / "coding_agent"


def test_the_readme_demo_runs_the_coding_agent_in_its_sandbox_and_scores_it_by_its_tests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN the README's command, from the repository root, on 3 tasks x 2 samples
    monkeypatch.chdir(PROJECT_ROOT)
    output = tmp_path / "results.jsonl"
    readme = (
        "demo --agent examples/coding_agent/app.py --dataset examples/coding_agent/tasks.jsonl "
        "--model-script examples/coding_agent/stand_in.json"
    )
    # WHEN it runs
    code = main([*readme.split(), "--prompts", "3", "--samples", "2", "--run-dir", str(tmp_path / "stack"),
                 "--output", str(output)])  # fmt: skip
    # THEN every rollout succeeded, each scored by the fraction of its task's tests its solution passed
    assert code == 0
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert len(records) == 6 and all(r["status"] == "succeeded" for r in records)
    results = [r["result"] for r in records]
    for result in results:
        assert result["rewards"] == result["tests_passed"] / result["tests_total"]
        assert result["finish"] == "answered" and result["solution"]
    # AND the model's tool calls ran in the session's sandbox (multi-turn rollouts), and the group has signal
    assert any(result["tool_calls"] >= 1 and result["turns"] == 2 for result in results)
    assert len({result["rewards"] for result in results}) > 1
    out = capsys.readouterr().out
    assert "rollouts        6 (succeeded 6)" in out and "GRPO groups     3 kept" in out
