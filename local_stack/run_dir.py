"""One local stack per run directory: its ``state.json`` record and the lock that guards starting one.

A stack that starts (``rollouts local up``, ``rollouts demo``, ``LocalStack.start()`` from Python) takes an
exclusive lock on ``<run dir>/lock`` while it checks for a stack already recorded there and writes its own
``state.json``; a recorded stack whose processes still run makes the start fail with
:class:`StackRunningError`, which says who started it, when, and how to stop it. The record goes when the
stack stops (``LocalStack.stop()``, ``rollouts local down``).
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from local_stack._process import pid_alive

__all__ = ["STATE_FILE", "StackRunningError", "alive", "describe_running", "guard", "read_state", "running_state"]

STATE_FILE = "state.json"
LOCK_FILE = "lock"


class StackRunningError(RuntimeError):
    """A local stack already runs from this run directory (or another command is starting one there now)."""


def read_state(run_dir: Path) -> dict[str, Any] | None:
    """The recorded state of the stack in ``run_dir``, or ``None`` if none is recorded.

    Raises:
        SystemExit: ``state.json`` is not a JSON object (the message says what to do).
    """
    path = run_dir / STATE_FILE
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except json.JSONDecodeError as exc:
        raise SystemExit(f"{path} is not valid JSON ({exc}); delete it and stop stray processes by hand") from exc
    if not isinstance(state, dict):
        raise SystemExit(f"{path} is not a JSON object; delete it and stop stray processes by hand")
    return state


def alive(process: dict[str, Any]) -> bool:
    """Whether a recorded process still runs: same pid and same command line (pids get reused)."""
    pid = process["pid"]
    if not pid_alive(pid):
        return False
    cmdline = Path(f"/proc/{pid}/cmdline")
    if not cmdline.exists():
        return True
    try:
        return cmdline.read_bytes().split(b"\0")[:-1] == [arg.encode() for arg in process["argv"]]
    except OSError:
        return False


def running_state(run_dir: Path) -> dict[str, Any] | None:
    """The recorded state if any of its processes still runs, else ``None``."""
    state = read_state(run_dir)
    if state and any(alive(process) for process in state["processes"]):
        return state
    return None


@contextmanager
def guard(run_dir: Path, owner: str) -> Iterator[None]:
    """Hold ``run_dir``'s start lock; refuse when a stack recorded there still runs.

    Raises:
        StackRunningError: a recorded stack runs, or another process holds the lock (starting one now).
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    with (run_dir / LOCK_FILE).open("a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            raise StackRunningError(
                f"another command is starting a local stack in {run_dir} now ({lock.read().strip() or 'unknown'}); "
                f"wait for it, then `rollouts local status --run-dir {run_dir}`, or use another --run-dir"
            ) from None
        try:
            state = running_state(run_dir)
            if state is not None:
                raise StackRunningError(describe_running(run_dir, state))
            lock.truncate(0)
            lock.write(f"{owner}, pid {os.getpid()}")
            lock.flush()
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def describe_running(run_dir: Path, state: dict[str, Any]) -> str:
    """Say which stack runs from ``run_dir``: who started it, when, where its endpoints are, how to stop it."""
    started = state.get("started_at")
    when = f" at {datetime.fromtimestamp(started, UTC):%Y-%m-%d %H:%M:%S} UTC" if started else ""
    owner = state.get("owner") or "an earlier command"
    moto = state.get("urls", {}).get("moto") or "-"
    return (
        f"a local stack already runs from {run_dir} (started by {owner}{when}; moto at {moto}, logs in "
        f'{run_dir}/): use it (`eval "$(rollouts local status --run-dir {run_dir} --env)"`), stop it with '
        f"`rollouts local down --run-dir {run_dir}`, or pass another --run-dir"
    )
