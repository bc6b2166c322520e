"""One agent process: the microVM analogue.

Each process gets its own port (``PORT``), its own ``HOME``, ``TMPDIR`` and (by default) working directory
under one temporary root that is removed when the process ends, and a scrubbed environment. It runs in its
own process group so ending it also ends anything it started.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

import httpx

from local_stack.acr_emulator.errors import RuntimeClientError
from rollout_contract.protocol import PingStatus

if TYPE_CHECKING:
    from local_stack.acr_emulator.config import RuntimeConfig

__all__ = ["AgentProcess", "PingReport", "agent_environment"]

logger = logging.getLogger(__name__)

_BASIC_ENV = ("PATH", "LANG", "LANGUAGE", "TZ")
_READY_POLL_S = 0.05
_PING_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class PingReport:
    """What one ``GET /ping`` answered."""

    status: str
    time_of_last_update: float | None


def agent_environment(runtime: RuntimeConfig, *, port: int, home: Path, tmpdir: Path) -> dict[str, str]:
    """The complete environment of an agent process: basics, what the runtime grants, and its own dirs."""
    env = {k: v for k, v in os.environ.items() if k in _BASIC_ENV or k.startswith("LC_")}
    env.update({name: os.environ[name] for name in runtime.inherit_env if name in os.environ})
    env.update(runtime.environment)
    env.update({"PORT": str(port), "HOME": str(home), "TMPDIR": str(tmpdir)})
    return env


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class AgentProcess:
    """A started agent process. Create with :meth:`spawn`; end with :meth:`terminate` or :meth:`kill`."""

    def __init__(self, proc: asyncio.subprocess.Process, *, port: int, root: Path, log: IO[bytes] | None) -> None:
        self._proc = proc
        self.port = port
        self.root = root
        self._log = log
        self.created_at = time.time()

    @classmethod
    async def spawn(cls, runtime: RuntimeConfig, *, log_dir: Path | None = None) -> AgentProcess:
        """Start ``runtime.command`` in a fresh directory tree on a free port.

        Output goes to ``log_dir/<pid>.log`` when ``log_dir`` is set, else to the emulator's stderr.

        Raises:
            RuntimeClientError: the command could not be started (missing executable, bad working dir).
        """
        root = Path(tempfile.mkdtemp(prefix="acr-session-"))
        home, tmpdir, work = root / "home", root / "tmp", root / "work"
        for d in (home, tmpdir, work):
            d.mkdir()
        port = _free_port()
        log = open(log_dir / f"{root.name}.log", "ab") if log_dir else None
        out = log if log else sys.stderr
        try:
            proc = await asyncio.create_subprocess_exec(
                *runtime.command,
                cwd=runtime.working_dir or work,
                env=agent_environment(runtime, port=port, home=home, tmpdir=tmpdir),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,
            )
        except OSError as e:
            if log:
                log.close()
            shutil.rmtree(root, ignore_errors=True)
            raise RuntimeClientError(f"could not start the agent process {runtime.command[0]!r}: {e}") from e
        logger.debug("started agent pid=%s port=%s runtime=%s", proc.pid, port, runtime.arn)
        return cls(proc, port=port, root=root, log=log)

    @property
    def pid(self) -> int:
        """The process id (also its process group id)."""
        return self._proc.pid

    @property
    def url(self) -> str:
        """Base URL of the agent's HTTP server."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def returncode(self) -> int | None:
        """Exit code once the process has ended, else None."""
        return self._proc.returncode

    async def wait(self) -> int:
        """Wait for the process to end; return its exit code."""
        return await self._proc.wait()

    async def wait_ready(self, client: httpx.AsyncClient, deadline: float) -> None:
        """Poll ``/ping`` until it answers, the process exits or the monotonic ``deadline`` passes.

        Raises:
            RuntimeClientError: the process exited, or was not ready in time.
        """
        while True:
            if self.returncode is not None:
                raise RuntimeClientError(f"the agent process exited with code {self.returncode} during start-up")
            if await self.ping(client, timeout=max(0.1, min(1.0, deadline - time.monotonic()))) is not None:
                return
            if time.monotonic() >= deadline:
                raise RuntimeClientError("the agent did not answer GET /ping within the start-up limit")
            await asyncio.sleep(_READY_POLL_S)

    async def ping(self, client: httpx.AsyncClient, timeout: float = _PING_TIMEOUT_S) -> PingReport | None:
        """``GET /ping``; None when the agent does not answer 200 with a known status."""
        try:
            response = await client.get(f"{self.url}/ping", timeout=timeout)
            body = response.json()
        except (httpx.HTTPError, ValueError):
            return None
        if response.status_code != 200 or not isinstance(body, dict) or body.get("status") not in set(PingStatus):
            return None
        updated = body.get("time_of_last_update")
        return PingReport(body["status"], float(updated) if isinstance(updated, int | float) else None)

    def kill(self) -> None:
        """Send SIGKILL to the whole process group at once."""
        self._signal_group(signal.SIGKILL)

    async def terminate(self, grace_s: float) -> None:
        """SIGTERM the process group, SIGKILL it after ``grace_s``, then remove the session's directories."""
        if self.returncode is None:
            self._signal_group(signal.SIGTERM)
            try:
                await asyncio.wait_for(self._proc.wait(), timeout=grace_s)
            except TimeoutError:
                logger.info("agent pid=%s ignored SIGTERM for %.1fs; killing it", self.pid, grace_s)
        self.kill()
        await self._proc.wait()
        self.cleanup()

    def cleanup(self) -> None:
        """Remove the process's directories and close its log (the process must have ended)."""
        if self._log:
            self._log.close()
        shutil.rmtree(self.root, ignore_errors=True)

    def _signal_group(self, sig: signal.Signals) -> None:
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            return
