"""``agentcore-rollouts[trainer]`` alone: the ``rollouts`` CLI works, and commands needing another extra say which.

Each case runs the CLI in a fresh interpreter where the ``local`` extra's modules cannot be imported, as in an
environment that installed only the trainer extra.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.processes

LOCAL_EXTRA_MODULES = ("starlette", "uvicorn", "moto", "rllm_model_gateway")
RUN_WITHOUT_LOCAL_EXTRA = (
    "import sys\n"
    f"for name in {LOCAL_EXTRA_MODULES!r}:\n"
    "    sys.modules[name] = None  # `import name` now raises ModuleNotFoundError\n"
    "from trainer_client._cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def _rollouts(*args: str, cwd) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", RUN_WITHOUT_LOCAL_EXTRA, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=cwd,
    )


@pytest.mark.parametrize("command", [["demo"], ["local", "up"]])
def test_commands_that_need_the_local_extra_say_how_to_install_it(command, tmp_path):
    done = _rollouts(*command, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "pip install 'agentcore-rollouts[local]'" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("command", [["--help"], ["eval", "--help"], ["demo", "--help"], ["local", "up", "--help"]])
def test_the_trainer_commands_and_help_work_without_it(command, tmp_path):
    done = _rollouts(*command, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr


def test_the_cli_starts_without_importing_an_http_client():
    # GIVEN a fresh interpreter
    code = "import sys, trainer_client._cli; print('httpx' in sys.modules)"
    # WHEN the rollouts CLI's module is imported
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60).stdout
    # THEN httpx (0.1-0.2 s to import, and with it rich, pygments and click when installed) waits for a trace reader
    assert out.strip() == "False"
