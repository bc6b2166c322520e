"""The fork-server template process: preload modules once, then fork one agent process per session.

The emulator runs this file as a script with the runtime's interpreter (standard library only, so it imports
nothing of the emulator) and speaks JSON lines with it over the template's stdin and stdout:

- emulator -> template, first line: ``{"command": [...], "preload": [...]}`` (the runtime's command without
  the interpreter, and the modules to import);
- template -> emulator: ``{"event": "ready", "pid": P}``, or ``{"event": "failed", "error": "..."}`` then exit;
- emulator -> template: ``{"op": "spawn", "id": N, "env": {...}, "cwd": "...", "log": "..." | null}``;
- template -> emulator: ``{"event": "spawned", "id": N, "pid": P}`` or ``{"event": "spawn_failed", "id": N,
  "error": "..."}``, and ``{"event": "exited", "pid": P, "returncode": R}`` once it has reaped a child
  (``R`` is negative for a signal, as in :mod:`subprocess`).

The template starts no thread and no event loop: it imports, then waits in ``select``. Each child becomes its
own session and process group, takes the environment, working directory and log it was given, and runs the
command in-process (``runpy``) as ``python path.py args...`` or ``python -m module args...`` would. On EOF
(the emulator has gone) the template SIGKILLs the process groups of its remaining children, reaps them and exits.
"""

from __future__ import annotations

import json
import os
import runpy
import select
import signal
import sys
import tempfile
import traceback
from typing import Any

_READ_SIZE = 65536


def main() -> None:
    """Preload, serve spawn requests, and in a forked child run the agent command."""
    channel_in, channel_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    os.close(devnull)
    reader = _LineReader(channel_in)
    init = json.loads(reader.first_line())
    command, preload = init["command"], init["preload"]
    sys.path[0] = _main_path_entry(command, os.getcwd())
    error = _preload(preload)
    if error:
        _send(channel_out, {"event": "failed", "error": error})
        sys.exit(1)
    _send(channel_out, {"event": "ready", "pid": os.getpid()})
    request = _serve(reader, channel_out)
    _run(command, request)


def _main_path_entry(command: list[str], cwd: str) -> str:
    if command[0] == "-m":
        return cwd
    return os.path.dirname(os.path.realpath(command[0]))


def _preload(modules: list[str]) -> str | None:
    for name in modules:
        try:
            __import__(name)
        except BaseException as e:
            traceback.print_exc()
            return f"importing preload module {name!r} failed: {type(e).__name__}: {e}"
    threads = len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else 1
    if threads > 1:
        return (
            f"the preload modules started {threads - 1} thread(s) at import, which a fork cannot copy; "
            "preload only modules whose import starts no thread"
        )
    return None


def _serve(reader: _LineReader, channel_out: int) -> dict[str, Any]:
    """Fork a child per spawn request and report exits; return the request in the child, never in the template."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: set[int] = set()
    private = (reader.fd, channel_out, wake_r, wake_w)
    while True:
        readable, _, _ = select.select([reader.fd, wake_r], [], [])
        if wake_r in readable:
            _drain(wake_r)
        _reap(children, channel_out, block=False)
        if reader.fd not in readable:
            continue
        lines = reader.read()
        if lines is None:
            for pid in children:
                _kill_group(pid)
            _reap(children, channel_out, block=True)
            sys.exit(0)
        for line in lines:
            request: dict[str, Any] = json.loads(line)
            if _fork(request, children, channel_out, private):
                return request


def _fork(request: dict[str, Any], children: set[int], channel_out: int, private: tuple[int, ...]) -> bool:
    """Start one child; True in the child (set up to run the command), False in the template."""
    if not os.path.isdir(request["cwd"]):
        _send(channel_out, {"event": "spawn_failed", "id": request["id"], "error": f"no directory {request['cwd']}"})
        return False
    try:
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if request["log"] else 2
    except OSError as e:
        _send(channel_out, {"event": "spawn_failed", "id": request["id"], "error": f"cannot open its log: {e}"})
        return False
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        pid = os.fork()
    except OSError as e:
        _send(channel_out, {"event": "spawn_failed", "id": request["id"], "error": f"fork failed: {e}"})
        pid = -1
    if pid == 0:
        os.setsid()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.dup2(log, 1)
        os.dup2(log, 2)
        for fd in {*private, log} - {1, 2}:
            os.close(fd)
        return True
    if log != 2:
        os.close(log)
    if pid > 0:
        children.add(pid)
        _send(channel_out, {"event": "spawned", "id": request["id"], "pid": pid})
    return False


def _run(command: list[str], request: dict[str, Any]) -> None:
    """Become the agent: its directory and environment, then its command as ``__main__``."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None
    if command[0] == "-m":
        sys.argv = [command[1], *command[2:]]
        sys.path[0] = os.getcwd()
        runpy.run_module(command[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(command)
        sys.path[0] = _main_path_entry(command, os.getcwd())
        runpy.run_path(command[0], run_name="__main__")


def _reap(children: set[int], channel_out: int, *, block: bool) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        _send(channel_out, {"event": "exited", "pid": pid, "returncode": os.waitstatus_to_exitcode(status)})


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        return


class _LineReader:
    """JSON lines from the emulator, read without blocking past what ``select`` announced."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buffer = b""

    def read(self) -> list[bytes] | None:
        """One read: the lines it completed (maybe none), or None at EOF."""
        data = os.read(self.fd, _READ_SIZE)
        if not data:
            return None
        *lines, self._buffer = (self._buffer + data).split(b"\n")
        return lines

    def first_line(self) -> bytes:
        """Block until the first line (the emulator sends nothing else before ``ready``)."""
        while (lines := self.read()) is not None:
            if lines:
                return lines[0]
        sys.exit("the emulator closed the channel before configuring the fork server")


def _drain(fd: int) -> None:
    try:
        while os.read(fd, _READ_SIZE):
            pass
    except BlockingIOError:
        return


def _send(fd: int, message: dict[str, Any]) -> None:
    data = (json.dumps(message) + "\n").encode()
    try:
        while data:
            data = data[os.write(fd, data) :]
    except BrokenPipeError:
        return


if __name__ == "__main__":
    main()
