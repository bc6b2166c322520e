"""The coding agent through the whole local stack, as its README runs it: ``rollouts demo --agent``, and
``rollouts local up --agent`` + ``rollouts eval`` as a run of an experiment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from e2e_support import run_doc_block

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


def test_the_readme_local_up_block_evaluates_the_tasks_as_a_run_on_the_hosted_agent(tmp_path: Path) -> None:
    # GIVEN the README's `local up --agent` + `eval` block, from a directory laid out as the repository root
    # WHEN it runs as written
    done = run_doc_block(EXAMPLE / "README.md", "coding-local-up", tmp_path)
    # THEN every command succeeded and the 8 tasks x 2 samples ran as run 'stand-in-1' of experiment 'coding'
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "coding-stand-in-1.jsonl").read_text().splitlines()]
    assert len(records) == 16 and all(r["status"] == "succeeded" for r in records)
    assert all(r["result"]["result_key"].startswith(f"coding/stand-in-1/{r['input_id']}/") for r in records)
    # AND each reward is the fraction of its task's tests passed, with the stand-in's spread across samples
    assert all(r["reward"] == r["result"]["tests_passed"] / r["result"]["tests_total"] for r in records)
    assert len({r["reward"] for r in records}) > 1
