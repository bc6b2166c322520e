"""End-to-end helpers: the real local stack (moto server, ACR emulator, workers) with a scripted agent."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from local_stack.stack import PROJECT_ROOT, LocalStack, StackSettings
from trainer_client import PollSettings, RolloutClient

HERE = Path(__file__).parent
SCRIPTED_AGENT = HERE / "agents" / "scripted_agent.py"
TRAINER_PROCESS = HERE / "trainer_process.py"
#: The scripted agent's libraries, imported once by the emulator's fork server.
AGENT_PRELOAD = ("agent_app.preload",)
EXP = "e2e"
#: Payloads above this size are refused by the emulator (ACR's limit is 100 MB; lowered to test it).
EMULATOR_MAX_PAYLOAD = 300 * 1024


def scripted_stack(run_dir: Path, experiment: str, **settings: Any) -> LocalStack:
    """A local stack whose runtime runs the scripted agent, sweeping every second (no gateway unless asked)."""
    runtime_options = {"preload": AGENT_PRELOAD, **settings.pop("runtime_options", {})}
    settings.setdefault("gateway", False)
    return LocalStack(
        StackSettings(
            run_dir=run_dir,
            experiments=(experiment,),
            agent_command=(sys.executable, str(SCRIPTED_AGENT)),
            sweep_interval_s=1.0,
            runtime_options=runtime_options,
            **settings,
        )
    )


def connect(stack: LocalStack, experiment: str = EXP, **options: Any) -> RolloutClient:
    """A trainer client of ``experiment`` on ``stack``, found through its descriptor as a user would (``options``:
    more of ``RolloutClient``'s keywords)."""
    return RolloutClient.for_experiment(experiment, poll=PollSettings(wait_time_s=1, deadline_grace_s=30), **options)


def emulator_counters(stack: LocalStack) -> dict[str, int]:
    """The emulator's counters (invokes, throttles, stops, starts, ...)."""
    return httpx.get(f"{stack.emulator_url}/_admin/stats", timeout=5).json()["counters"]


def run_trainer_process(stack: LocalStack, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``trainer_process.py`` as a separate trainer process with the stack's environment."""
    env = {**os.environ, **stack.env}
    return subprocess.run(
        [sys.executable, str(TRAINER_PROCESS), *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


@contextmanager
def serving(stack: LocalStack) -> Iterator[LocalStack]:
    """Start ``stack`` with its environment set for trainer clients of this process; stop it after."""
    with stack as running, pytest.MonkeyPatch.context() as env:
        for name, value in running.env.items():
            env.setenv(name, value)
        yield running


def wait_until(condition: Callable[[], bool], timeout_s: float = 20.0) -> bool:
    """Poll ``condition`` every 0.2 s until it holds or ``timeout_s`` passed; return its last value."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


def run_doc_block(doc: Path, name: str, cwd: Path, timeout_s: float = 900) -> subprocess.CompletedProcess[str]:
    """Run the bash block after ``<!-- test: NAME -->`` in ``doc`` as written, stopping at its first failing command.

    It runs in ``cwd`` laid out as the repository root (``.venv-demo``, the environment ``make demo`` builds, with
    ``examples`` and ``local_stack`` linked there; ``.venv`` too) with no ``AWS_*`` variables of ours; a local stack
    it left up is stopped afterwards. Skips without ``.venv-demo`` (``make demo-env`` builds it).
    """
    found = re.search(rf"<!-- test: {name} -->\n```bash\n(.*?)```", doc.read_text(), re.DOTALL)
    assert found is not None, f"{doc.relative_to(PROJECT_ROOT)} lost its tested block {name!r}"
    demo_python()
    for link in (".venv", DEMO_VENV, "examples", "local_stack"):
        (cwd / link).symlink_to(PROJECT_ROOT / link)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    try:
        return subprocess.run(
            ["bash", "-euo", "pipefail", "-c", found.group(1)],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    finally:
        subprocess.run([".venv/bin/rollouts", "local", "down"], cwd=cwd, env=env, capture_output=True, check=False)


#: The light environment ``make demo`` builds; the docs' local commands run from it.
DEMO_VENV = ".venv-demo"


def demo_python() -> Path:
    """``.venv-demo/bin/python``; the test skips, saying how to build it, when ``make demo-env`` has not run."""
    python = PROJECT_ROOT / DEMO_VENV / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no {DEMO_VENV}: the docs' local commands run from the demo environment (`make demo-env`)")
    return python


def headless_browser() -> str:
    """Debian's ``chromium`` (``make test`` installs it when missing and running as root); the test skips without."""
    found = shutil.which("chromium")
    if found is None:
        pytest.skip("no chromium on PATH: install Debian's `chromium` (as root: apt-get install -y chromium)")
    return found


def browse(browser: str, url: str, *options: str) -> str:
    """What headless ``browser`` makes of ``url`` after 8 s of the page's time (its scripts and requests run)."""
    argv = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=8000", *options, url]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True).stdout
