"""Child processes of the local stack: start with a log file, wait until ready, stop without leaks.

Every child runs in its own session (process group), so stopping it also stops whatever it spawned (the
ACR emulator's agent processes, uvicorn workers), and a Ctrl-C in the terminal reaches only the parent,
which then stops the children in order.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "environment",
    "ManagedProcess",
    "ProcessStartError",
    "free_port",
    "group_alive",
    "http_ready",
    "pid_alive",
    "stop_pid",
]

LOCALHOST = "127.0.0.1"
_POLL_S = 0.05


class ProcessStartError(RuntimeError):
    """A child process exited or did not become ready in time (the message points at its log)."""


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that the OS just chose (bind to port 0) and released."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOCALHOST, 0))
        port: int = sock.getsockname()[1]
        return port


def http_ready(url: str) -> Callable[[], bool]:
    """Return a readiness check: ``url`` answers a GET with any status below 500."""

    import httpx  # here, not at module level: the CLI imports this module and must stay light

    def check() -> bool:
        try:
            return httpx.get(url, timeout=1.0, trust_env=False).status_code < 500
        except httpx.HTTPError:
            return False

    return check


def pid_alive(pid: int) -> bool:
    """Return whether process ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    if stat.exists():
        try:
            return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, IndexError):
            return False
    return True


def stop_pid(pid: int, *, grace_s: float = 5.0) -> None:
    """Stop process group ``pid`` (a session leader): SIGTERM, then SIGKILL after ``grace_s``."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 2.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if not group_alive(pid):
                return
            time.sleep(_POLL_S)


def group_alive(pgid: int) -> bool:
    """Return whether process group ``pgid`` has a member that is not a zombie."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return pid_alive(pgid) or _has_live_members(pgid)


def _has_live_members(pgid: int) -> bool:
    proc = Path("/proc")
    if not proc.exists():
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


@dataclass
class ManagedProcess:
    """One child process of the stack, its log file and how to tell that it is ready.

    Attributes:
        name: short name, used in logs, ``state.json`` and error messages.
        argv: the command.
        log_path: where stdout and stderr go.
        env: the full environment of the child.
        cwd: working directory.
        url: the base URL it serves, if any.
        ready: a check that returns True once the process serves requests.
    """

    name: str
    argv: Sequence[str]
    log_path: Path
    env: Mapping[str, str]
    cwd: Path | None = None
    url: str | None = None
    ready: Callable[[], bool] | None = None
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def pid(self) -> int | None:
        """The child's pid (also its process group id), or None before start."""
        return self.popen.pid if self.popen else None

    def start(self) -> None:
        """Start the child in a new session, appending its output to ``log_path``."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.popen = subprocess.Popen(  # noqa: S603 - argv built by the stack, no shell
                list(self.argv),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(self.env),
                cwd=self.cwd,
                start_new_session=True,
            )

    def alive(self) -> bool:
        """Return whether the child is still running."""
        return self.popen is not None and self.popen.poll() is None

    def wait_ready(self, timeout_s: float) -> None:
        """Block until the readiness check passes.

        Raises:
            ProcessStartError: the child exited, or was not ready after ``timeout_s`` seconds.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.alive():
                raise ProcessStartError(
                    f"{self.name} exited with code {self.popen.returncode if self.popen else None} before it was "
                    f"ready; see {self.log_path}:\n{self.log_tail()}"
                )
            if self.ready is None or self.ready():
                return
            time.sleep(_POLL_S)
        raise ProcessStartError(f"{self.name} was not ready after {timeout_s:.0f} s; see {self.log_path}")

    def stop(self, grace_s: float = 5.0) -> None:
        """Stop the child and everything it spawned; reap it."""
        if self.popen is None:
            return
        stop_pid(self.popen.pid, grace_s=grace_s)
        try:
            self.popen.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()

    def log_tail(self, lines: int = 20) -> str:
        """Return the last ``lines`` lines of the child's log."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


@contextmanager
def environment(values: Mapping[str, str]) -> Iterator[None]:
    """Set environment variables for the block (boto3 clients and child processes see them), then restore them."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
