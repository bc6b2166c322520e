"""One sandbox command: its request checked, then run as ART's daemon runs it.

The command is an argv list, run without a shell, in ``cwd`` with ``env`` over the sandbox's own environment;
confined (:func:`run` given a ``workspace``), it runs as the sandbox user with ``env`` over a clean environment,
without the network unless the request grants it (``network``), under CPU, process and file limits
(``agent_app.confinement``), and sees of the filesystem its workspace and what is not hidden.
Its deadline (``timeout``, 1-3600 s, default 300) covers the wait for its output too: a command that exits
while a process it started still holds its output open is waited for until then. At the deadline the command's
own process is killed (a process it started may live on, as under ART's daemon) and its output is no longer
read. Each stream keeps its first 256 KiB; the rest is read and dropped, and the result says so.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import time
from dataclasses import dataclass
from typing import IO, Any

from agent_app.confinement import Confinement, clean_environment
from agent_app.runtime._protocol import InvalidInvocationError
from rollout_contract.sandbox import (
    COMMAND_FIELD,
    CWD_FIELD,
    DEFAULT_EXEC_TIMEOUT_S,
    ENV_FIELD,
    MAX_EXEC_TIMEOUT_S,
    MIN_EXEC_TIMEOUT_S,
    NETWORK_FIELD,
    OUTPUT_LIMIT_BYTES,
    TIMEOUT_FIELD,
)

__all__ = ["Command", "run"]

_READ_BYTES = 64 * 1024
#: A confined command's processes (threads count), bytes per file and private ``/tmp`` in MiB.
CONFINED_PROCESSES = 512
CONFINED_FILE_MB = 1024
CONFINED_TMP_MB = 512
#: The exit code of a command ended by a signal (Go's ``ProcessState.ExitCode``, which ART's daemon reports).
SIGNALLED = -1


@dataclass(frozen=True)
class Command:
    """A checked command request."""

    argv: tuple[str, ...]
    cwd: str | None = None
    env: dict[str, str] | None = None
    timeout_s: int = DEFAULT_EXEC_TIMEOUT_S
    network: bool = False

    @classmethod
    def parse(cls, payload: dict[str, Any]) -> Command:
        """Read a command request (the payload without its envelope).

        Raises:
            InvalidInvocationError: a field is missing or malformed; the message names it and what to send.
        """
        argv = payload.get(COMMAND_FIELD)
        if not isinstance(argv, list) or not argv or not all(isinstance(arg, str) for arg in argv):
            raise InvalidInvocationError(
                f"{COMMAND_FIELD} must be a non-empty list of strings: the executable, then its arguments (no shell "
                'is started; send ["/bin/sh", "-c", script] for shell syntax)'
            )
        cwd = payload.get(CWD_FIELD)
        if cwd is not None and not isinstance(cwd, str):
            raise InvalidInvocationError(f"{CWD_FIELD} must be a string (a directory in the sandbox)")
        env = payload.get(ENV_FIELD)
        if env is not None and not (
            isinstance(env, dict)
            and all(isinstance(k, str) and k and "=" not in k and isinstance(v, str) for k, v in env.items())
        ):
            raise InvalidInvocationError(
                f"{ENV_FIELD} must be an object of strings, each name non-empty and without '='"
            )
        timeout = payload.get(TIMEOUT_FIELD, DEFAULT_EXEC_TIMEOUT_S)
        if isinstance(timeout, bool) or not isinstance(timeout, int):
            raise InvalidInvocationError(f"{TIMEOUT_FIELD} must be a whole number of seconds, got {timeout!r}")
        if not MIN_EXEC_TIMEOUT_S <= timeout <= MAX_EXEC_TIMEOUT_S:
            raise InvalidInvocationError(
                f"{TIMEOUT_FIELD} must be between {MIN_EXEC_TIMEOUT_S} and {MAX_EXEC_TIMEOUT_S} seconds, got {timeout}"
            )
        network = payload.get(NETWORK_FIELD, False)
        if not isinstance(network, bool):
            raise InvalidInvocationError(f"{NETWORK_FIELD} must be true or false, got {network!r}")
        return cls(tuple(argv), cwd, env, timeout, network)


class _Capture:
    """The first :data:`OUTPUT_LIMIT_BYTES` of one output stream, and whether more came."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.truncated = False

    def add(self, chunk: bytes) -> None:
        room = OUTPUT_LIMIT_BYTES - len(self.data)
        if len(chunk) > room:
            self.truncated = True
        self.data += chunk[: max(room, 0)]

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


def run(
    command: Command, *, workspace: str | None = None, hidden: tuple[str, ...] = (), clock: Any = time.monotonic
) -> dict[str, Any]:
    """Run ``command`` to its end or its deadline; return ART's result fields.

    With a ``workspace`` (the default ``cwd``) the command is confined, ``hidden`` directories empty to it.

    Raises:
        OSError: the command could not be started (no such executable or directory, not permitted).
        ValueError: an argument or variable holds a NUL byte.
        ConfinementError: confinement cannot be had here.
    """
    deadline = clock() + command.timeout_s
    argv, cwd = list(command.argv), command.cwd
    env = None if command.env is None else {**os.environ, **command.env}
    if workspace is not None:
        cwd = cwd or workspace
        if not os.path.isdir(cwd):
            raise FileNotFoundError(f"no such directory: {cwd}")
        confinement = Confinement(
            cpu_s=command.timeout_s,
            memory_mb=None,  # the session's own limit (ACR's microVM, the emulator's per process) applies
            processes=CONFINED_PROCESSES,
            file_mb=CONFINED_FILE_MB,
            tmp_mb=CONFINED_TMP_MB,
            network=command.network,
            workdir=cwd,
            hidden=hidden,
        )
        argv, cwd, env = confinement.command(argv, scratch=cwd), None, clean_environment(command.env)
    process = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    stdout, stderr = _Capture(), _Capture()
    try:
        finished = _drain({process.stdout: stdout, process.stderr: stderr}, deadline, clock) and _wait(
            process, deadline, clock
        )
    finally:
        process.stdout.close()
        process.stderr.close()
    if not finished:
        process.kill()
        process.wait()
    code = process.returncode
    return {
        "exit_code": SIGNALLED if code < 0 else code,
        "stdout": stdout.text(),
        "stderr": stderr.text(),
        "timed_out": not finished,
        "stdout_truncated": stdout.truncated,
        "stderr_truncated": stderr.truncated,
    }


def _drain(streams: dict[IO[bytes], _Capture], deadline: float, clock: Any) -> bool:
    """Read every stream to its end; ``False`` when the deadline came first."""
    with selectors.DefaultSelector() as selector:
        for stream, capture in streams.items():
            selector.register(stream, selectors.EVENT_READ, capture)
        while selector.get_map():
            remaining = deadline - clock()
            if remaining <= 0:
                return False
            for key, _ in selector.select(remaining):
                chunk = os.read(key.fd, _READ_BYTES)
                if chunk:
                    key.data.add(chunk)
                else:
                    selector.unregister(key.fileobj)
    return True


def _wait(process: subprocess.Popen[bytes], deadline: float, clock: Any) -> bool:
    """Wait for the process to exit; ``False`` when the deadline came first."""
    try:
        process.wait(timeout=max(0.0, deadline - clock()))
    except subprocess.TimeoutExpired:
        return False
    return True
