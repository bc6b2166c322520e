"""docs/migrating.md, "From ART", step 2, run exactly as the page writes it: your agent file hosted under a
runtime ARN of your own (adopted, as ``cdk deploy -c runtime_arn`` does in AWS), the doctor's canary through it,
ART's evaluation script after its move as a run of the experiment, and the run's results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from e2e_support import run_doc_block

from local_stack.stack import PROJECT_ROOT

pytestmark = pytest.mark.e2e

GUIDE = PROJECT_ROOT / "docs" / "migrating.md"
ADOPTED_ARN = "arn:aws:bedrock-agentcore:us-east-1:000000000000:runtime/strands_math_agent_rl-Ab12Cd34Ef"


def test_the_art_guides_local_steps_run_as_written(tmp_path: Path) -> None:
    # GIVEN a working directory laid out as the repository root (the page's commands are relative to it)
    # WHEN the page's block runs in bash, stopping at the first failing command
    done = run_doc_block(GUIDE, "from-art-local", tmp_path)
    report = done.stdout + done.stderr[-3000:]
    # THEN every command succeeded
    assert done.returncode == 0, report
    lines = done.stdout.splitlines()
    # AND the doctor passed every check and every canary hop, through the adopted runtime
    doctor = [line for line in lines if line.startswith(("PASS", "FAIL"))]
    assert doctor and all(line.startswith("PASS") for line in doctor), report
    assert any(line.startswith("PASS  runtime") and f"{ADOPTED_ARN} is READY" in line for line in doctor), report
    assert sum(line.startswith("PASS  canary") for line in doctor) == 6
    # AND the evaluation ran every row as run 'qwen3-eval' of experiment 'gsm8k'
    summary = json.loads(next(line for line in lines if line.startswith('{"rollouts"')))
    assert (summary["rollouts"], summary["succeeded"]) == (8, 8) and summary["accuracy"] > 0.5
    assert summary["results"].endswith("/gsm8k/qwen3-eval/")
    # AND `rollouts results --run` exported that run's eight results (the canary, in no run, is not among them)
    exported = [json.loads(line) for line in (tmp_path / "qwen3-eval.jsonl").read_text().splitlines()]
    assert len(exported) == 8 and all(r["result_key"].startswith("gsm8k/qwen3-eval/") for r in exported)
