"""``rollouts demo`` end to end: the math agent through the whole local stack, with token traces."""

from __future__ import annotations

import gc
import io
import json
from pathlib import Path

import pytest

from examples.math_agent.local import MATH_DEMO
from local_stack.demo import DemoSettings, DemoTask, run_demo
from local_stack.run_dir import STATE_FILE, StackRunningError, running_state
from trainer_client import FailurePolicy
from trainer_client._cli import main

pytestmark = pytest.mark.e2e


def with_a_bad_first_prompt(count: int, seed: int):
    """The math demo's problems, the first one without its ``prompt``."""
    return [("no-prompt", {"answer": "1"}), *MATH_DEMO.dataset(count - 1, seed)]


def with_a_bad_last_prompt(count: int, seed: int):
    """The math demo's problems, the last one without its ``prompt`` (the agent fails on it)."""
    return [*MATH_DEMO.dataset(count - 1, seed), ("no-prompt", {"answer": "1"})]


def test_the_demo_runs_grpo_groups_of_the_math_agent_and_writes_every_result(tmp_path: Path) -> None:
    # GIVEN a small demo: 3 problems x 2 samples at temperature 0 (the stand-in policy makes no mistakes), and a
    # fourth problem the agent cannot read
    output = tmp_path / "results.jsonl"
    settings = DemoSettings(
        prompts=4, samples_per_prompt=2, concurrency=8, temperature=0.0, policy=FailurePolicy.DROP_GROUP,
        run_dir=tmp_path / "stack", output=output,
    )  # fmt: skip
    task = DemoTask(agent=MATH_DEMO.agent, dataset=with_a_bad_last_prompt, model_id=MATH_DEMO.model_id)
    # WHEN it runs
    printed = io.StringIO()
    report = run_demo(task, settings, out=printed)
    # THEN the readable problems succeeded with full reward, their groups were kept and the other dropped,
    # every session was stopped, the token traces came back, and the results file holds one line per rollout
    assert report.by_status == {"succeeded": 6, "agent_error": 2}
    assert report.rewards == [1.0] * 6
    assert report.groups_kept == 3 and report.groups_dropped == 1
    assert report.sessions_stopped == report.sessions_started == 8
    assert report.traced_rollouts == 6 and report.completion_tokens > 0
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    assert len({line["session_id"] for line in lines}) == 8
    assert all(line["token_traces"][0]["completion_token_ids"] for line in lines if line["success"])
    # AND the summary names the failures' reason, and no stack is left recorded
    text = printed.getvalue()
    assert "== demo summary ==" in text
    assert "2 of 8 rollouts failed:" in text
    assert "prompt 4: agent_error: KeyError: 'prompt'" in text
    assert not (tmp_path / "stack" / STATE_FILE).exists()


@pytest.fixture
def ctrl_c_after_the_first_result(monkeypatch: pytest.MonkeyPatch) -> None:
    """Press Ctrl-C as the first result comes in (its progress update raises ``KeyboardInterrupt``)."""

    def interrupt(self, item):
        raise KeyboardInterrupt

    monkeypatch.setattr("trainer_client.progress.RolloutProgress.update", interrupt)


# The kept stack's processes outlive their Popen objects in this process, as they outlive `rollouts demo`.
@pytest.mark.filterwarnings("ignore:subprocess .* is still running:ResourceWarning")
def test_ctrl_c_cancels_the_demos_rollouts_or_with_keep_running_leaves_them_and_the_stack(
    tmp_path: Path, ctrl_c_after_the_first_result: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = tmp_path / "stack"
    settings = DemoSettings(prompts=3, samples_per_prompt=1, concurrency=3, run_dir=run_dir, output=tmp_path / "o")
    # The unreadable problem fails at once; the two others take the model's calls, and are still running then.
    task = DemoTask(agent=MATH_DEMO.agent, dataset=with_a_bad_first_prompt, model_id=MATH_DEMO.model_id)
    # GIVEN a demo interrupted at its first result, told to keep running
    printed = io.StringIO()
    with pytest.raises(KeyboardInterrupt):
        run_demo(task, DemoSettings(**{**settings.__dict__, "keep_running": True}), out=printed)
    try:
        # THEN the stack and the rollouts still running are left running, recorded for `rollouts local`
        assert "rollouts still running are left running (`rollouts local status" in printed.getvalue()
        assert running_state(run_dir) is not None
        # AND another demo in that run directory is refused, saying which stack runs there
        with pytest.raises(StackRunningError, match=r"already runs from .* \(started by `rollouts demo`"):
            run_demo(task, settings, out=io.StringIO())
    finally:
        assert main(["local", "down", "--run-dir", str(run_dir)]) == 0
        gc.collect()  # the kept stack's Popen objects go now, while this test ignores their ResourceWarning
    # WHEN a demo is interrupted the same way without --keep-running
    printed = io.StringIO()
    with pytest.raises(KeyboardInterrupt):
        run_demo(task, settings, out=printed)
    # THEN the rollouts still running were cancelled and the stack stopped
    assert "interrupted; cancelled 2 rollouts still running" in printed.getvalue()
    assert running_state(run_dir) is None and not (run_dir / STATE_FILE).exists()
    # AND every rollout started has its row, the cancelled ones too, and the summary counts them
    rows = [json.loads(line) for line in (tmp_path / "o").read_text().splitlines()]
    assert sorted(row["status"] for row in rows) == ["agent_error", "cancelled", "cancelled"]
    assert "== demo summary (interrupted) ==" in printed.getvalue()
    assert "cancelled 2)" in printed.getvalue()  # the interrupted update never counted the first
    assert f"run the same `rollouts demo` command with `--resume {tmp_path / 'o'}`" in printed.getvalue()
    # WHEN the interrupted demo is resumed from its results file (and nobody presses Ctrl-C)
    monkeypatch.undo()
    printed = io.StringIO()
    resumed = DemoSettings(**{**settings.__dict__, "resume": tmp_path / "o", "output": tmp_path / "o2"})
    report = run_demo(task, resumed, out=printed)
    # THEN only the two cancelled samples ran again; the ended row is kept as it was, and every prompt has its row
    assert "resuming from" in printed.getvalue() and "1 rollout kept, 2 to run" in printed.getvalue()
    again = [json.loads(line) for line in (tmp_path / "o2").read_text().splitlines()]
    (kept,) = [row for row in rows if row["status"] == "agent_error"]
    assert kept in again and len(again) == 3 and sorted(row["index"] for row in again) == [0, 1, 2]
    assert not {row["session_id"] for row in again if row != kept} & {row["session_id"] for row in rows}
    assert "cancelled" not in {row["status"] for row in again}
    assert sum(report.by_status.values()) == 3 and report.by_status["agent_error"] >= 1
