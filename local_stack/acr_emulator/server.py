"""Running the emulator: in this process (:func:`serve`) or as a background process (:func:`start_emulator`)."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType

import uvicorn

from local_stack.acr_emulator.app import create_app
from local_stack.acr_emulator.config import EmulatorConfig

__all__ = ["EmulatorProcess", "EmulatorStartError", "serve", "start_emulator"]

_GRACEFUL_SHUTDOWN_S = 5


class EmulatorStartError(RuntimeError):
    """A background emulator process did not come up."""


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, on_ready: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_ready = on_ready

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            self._on_ready()


def serve(
    config: EmulatorConfig,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve the emulator until SIGINT/SIGTERM, then end every agent process.

    Args:
        config: the runtimes and quotas.
        host: interface to bind (keep it on loopback).
        port: TCP port; 0 lets the OS choose.
        on_ready: called with the base URL once the server accepts requests.
    """
    app = create_app(config)
    # An explicit IPPROTO_TCP makes asyncio set TCP_NODELAY on accepted connections (with proto 0 it does not,
    # and every response then waits about 40 ms for a delayed ACK).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    url = f"http://{host}:{sock.getsockname()[1]}"
    uv_config = uvicorn.Config(
        app, log_level="warning", lifespan="on", timeout_graceful_shutdown=_GRACEFUL_SHUTDOWN_S, access_log=False
    )
    server = _Server(uv_config, lambda: on_ready(url) if on_ready else None)
    try:
        server.run(sockets=[sock])
    finally:
        app.state.manager.kill_all_now()
        sock.close()


class EmulatorProcess:
    """A background emulator process; use as a context manager or call :meth:`stop`."""

    def __init__(self, process: subprocess.Popen[bytes], url: str, config_file: Path | None) -> None:
        self.process = process
        self.url = url
        self._config_file = config_file

    @property
    def pid(self) -> int:
        """The emulator's process id."""
        return self.process.pid

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM the emulator (it ends its agent processes), SIGKILL it after ``timeout`` seconds."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout:
            self.process.stdout.close()
        if self._config_file:
            self._config_file.unlink(missing_ok=True)

    def __enter__(self) -> EmulatorProcess:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def start_emulator(
    config: EmulatorConfig | str | Path,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    python: str = sys.executable,
    log_file: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    startup_timeout_s: float = 30.0,
) -> EmulatorProcess:
    """Start ``python -m local_stack.acr_emulator serve`` in the background and wait until it is ready.

    Args:
        config: an :class:`EmulatorConfig` (written to a temporary JSON file) or the path of a JSON config file.
        host: interface to bind.
        port: TCP port; 0 lets the OS choose (read the result from ``.url``).
        python: interpreter to run it with.
        log_file: where the emulator's (and its agents') log output goes; default: this process's stderr.
        env: the emulator's environment (agents see only what their runtime grants); default: this process's.
        startup_timeout_s: how long to wait for it to accept requests.

    Raises:
        EmulatorStartError: it exited or was not ready in time.
    """
    config_file = None
    if isinstance(config, EmulatorConfig):
        fd, name = tempfile.mkstemp(prefix="acr-emulator-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(config.model_dump_json())
        config_file = config_path = Path(name)
    else:
        config_path = Path(config)
    command = [python, "-m", "local_stack.acr_emulator", "serve", "--config", str(config_path)]
    command += ["--host", host, "--port", str(port)]
    log = open(log_file, "ab") if log_file else None
    try:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, env=env)
    finally:
        if log:
            log.close()
    emulator = EmulatorProcess(process, "", config_file)
    try:
        emulator.url = _read_ready_url(process, startup_timeout_s)
    except EmulatorStartError:
        emulator.stop()
        raise
    return emulator


def _read_ready_url(process: subprocess.Popen[bytes], timeout_s: float) -> str:
    assert process.stdout is not None
    deadline = time.monotonic() + timeout_s
    while (remaining := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([process.stdout], [], [], remaining)
        if readable:
            line = process.stdout.readline()
            if not line:
                raise EmulatorStartError(f"the emulator exited with code {process.wait()} before it was ready")
            url: str = json.loads(line)["url"]
            return url
    raise EmulatorStartError(f"the emulator was not ready within {timeout_s:g}s")
