"""Handler modules import without settings; the first call says which setting is missing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from lambdas import sweeper
from lambdas.runtime import current_runtime

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.processes
def test_handler_modules_import_with_no_environment() -> None:
    # GIVEN an environment with no ROLLOUTS_* variables and no AWS settings
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT)}

    # WHEN the three handler modules are imported
    done = subprocess.run(
        [sys.executable, "-c", "import lambdas.dispatcher, lambdas.finisher, lambdas.sweeper"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    # THEN the import succeeds
    assert done.returncode == 0, done.stderr


def test_first_call_without_settings_names_the_missing_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN no ROLLOUTS_* variables
    for name in list(os.environ):
        if name.startswith("ROLLOUTS_"):
            monkeypatch.delenv(name)
    current_runtime.cache_clear()

    # WHEN a handler runs
    with pytest.raises(ValidationError) as caught:
        sweeper.handler({}, None)

    # THEN the error names what is missing
    assert "runtime_arn" in str(caught.value)
    current_runtime.cache_clear()
