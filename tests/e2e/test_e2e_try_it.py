"""The README's "Try it against the local stack" block, run exactly as written from ``.venv-demo`` (what ``make
demo`` builds): the stack up, a dataset of 8 problems x 4 samples through ``rollouts eval``, the status, the stack
down."""

from __future__ import annotations

from pathlib import Path

import pytest
from e2e_support import run_doc_block

from local_stack.stack import PROJECT_ROOT

pytestmark = pytest.mark.e2e


def test_the_readmes_try_it_block_runs_as_written_after_make_demo(tmp_path: Path) -> None:
    # WHEN the README's block runs in bash from a directory laid out as the repository root
    done = run_doc_block(PROJECT_ROOT / "README.md", "try-it", tmp_path)
    # THEN every command succeeded, every rollout of the eval succeeded and the status read the run
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "rollouts        32 (succeeded 32)" in done.stderr
    assert "rollouts    in flight 0" in done.stdout
