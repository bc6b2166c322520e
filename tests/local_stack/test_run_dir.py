"""One local stack per run directory: a second start is refused and says where the running one is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from local_stack.run_dir import STATE_FILE, StackRunningError
from local_stack.stack import PROJECT_ROOT, LocalStack, StackSettings

pytestmark = pytest.mark.processes

ROLLOUTS = "import sys; from trainer_client._cli import main; sys.exit(main(sys.argv[1:]))"


def _rollouts(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    return subprocess.run(
        [sys.executable, "-c", ROLLOUTS, *args], capture_output=True, text=True, env=env, cwd=PROJECT_ROOT, timeout=90
    )


def moto_only(run_dir: Path) -> StackSettings:
    """A stack of the moto server alone (the model is elsewhere, no emulator or workers): quick to start."""
    return StackSettings(
        run_dir=run_dir, experiments=("lock-test",), emulator=False, workers=False, gateway=False,
        model_base_url="http://127.0.0.1:9/v1",
    )  # fmt: skip


def test_a_running_stack_is_recorded_and_a_second_one_in_its_run_directory_is_refused(tmp_path: Path) -> None:
    # GIVEN a stack started from Python the way `rollouts demo` starts it
    run_dir = tmp_path / "run"
    with LocalStack(moto_only(run_dir), owner="`rollouts demo`") as first:
        # THEN it is recorded, and `rollouts local status` shows it and who started it
        assert json.loads((run_dir / STATE_FILE).read_text())["owner"] == "`rollouts demo`"
        status = _rollouts("local", "status", "--run-dir", str(run_dir))
        assert status.returncode == 0, status.stderr
        assert "started by `rollouts demo` at " in status.stdout
        # AND WHEN another stack starts in the same run directory, from Python or as `rollouts local up`
        with pytest.raises(StackRunningError) as refused:
            LocalStack(moto_only(run_dir)).start()
        up = _rollouts("local", "up", "--run-dir", str(run_dir), "--no-workers")
        # THEN both are refused, saying which stack runs there and how to use or stop it
        for message in (str(refused.value), up.stderr):
            assert f"a local stack already runs from {run_dir.resolve()} (started by `rollouts demo` at " in message
            assert f"moto at {first.moto_url}" in message
            assert f"`rollouts local down --run-dir {run_dir.resolve()}`" in message
        assert up.returncode == 1 and "Traceback" not in up.stderr
        # AND the running stack's record is untouched
        assert json.loads((run_dir / STATE_FILE).read_text())["started_at"] == first.started_at
    # THEN stopping it drops the record
    assert not (run_dir / STATE_FILE).exists()


@pytest.mark.parametrize("command", [["demo"], ["local", "up"]])
def test_a_model_url_that_does_not_answer_is_refused_before_anything_starts(tmp_path: Path, command) -> None:
    run_dir = tmp_path / "run"
    done = _rollouts(*command, "--model-url", "http://127.0.0.1:9/v1", "--run-dir", str(run_dir))
    assert done.returncode == 1
    assert "the model endpoint does not answer at http://127.0.0.1:9/v1/models (ConnectError" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (run_dir / STATE_FILE).exists() and not list(run_dir.glob("*.log"))
