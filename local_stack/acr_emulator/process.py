"""One agent process: the microVM analogue.

Each process gets its own port (``PORT``), its own ``HOME``, ``TMPDIR`` and (by default) working directory
under one temporary root that is removed when the process ends, and a scrubbed environment. It runs in its
own process group so ending it also ends anything it started. It is started with ``exec`` or, for a runtime
with ``preload``, forked from the runtime's :class:`~local_stack.acr_emulator.forkserver.ForkServer`; both
are driven the same way from then on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Protocol

import httpx

from local_stack.acr_emulator.errors import RuntimeClientError
from rollout_contract.protocol import PingStatus

if TYPE_CHECKING:
    from local_stack.acr_emulator.config import RuntimeConfig
    from local_stack.acr_emulator.forkserver import ForkServer

__all__ = ["AgentProcess", "PingReport", "ProcessHandle", "agent_environment", "release_port", "reserve_port"]

logger = logging.getLogger(__name__)

_BASIC_ENV = ("PATH", "LANG", "LANGUAGE", "TZ")
#: Put first on every agent's ``PYTHONPATH``: its ``sitecustomize`` gives each session its own 8080.
AGENT_SITE = Path(__file__).with_name("agent_site")
_READY_POLL_S = 0.05
_PING_TIMEOUT_S = 5.0
# How long an agent may listen elsewhere without answering on its PORT before start-up fails fast.
_WRONG_PORT_GRACE_S = 1.0
_TCP_LISTEN = "0A"


@dataclass(frozen=True)
class PingReport:
    """What one ``GET /ping`` answered."""

    status: str
    time_of_last_update: float | None


class ProcessHandle(Protocol):
    """A started OS process: an :class:`asyncio.subprocess.Process` or a forked ``ForkedChild``."""

    @property
    def pid(self) -> int:
        """The process id."""

    @property
    def returncode(self) -> int | None:
        """Exit code once the process has ended (negative: the signal that ended it), else None."""

    async def wait(self) -> int:
        """Wait for the process to end; return its exit code."""


def agent_environment(runtime: RuntimeConfig, *, port: int | None, home: Path, tmpdir: Path) -> dict[str, str]:
    """The complete environment of an agent process: basics, what the runtime grants, and its own dirs.

    ``port`` is None for a fork server's template, which serves nothing (it gets no ``PORT``). ``PYTHONPATH``
    starts with :data:`AGENT_SITE`, whose ``sitecustomize`` maps a bind to 8080 onto ``PORT`` (D53).
    """
    env = {k: v for k, v in os.environ.items() if k in _BASIC_ENV or k.startswith("LC_")}
    env.update({name: os.environ[name] for name in runtime.inherit_env if name in os.environ})
    env.update(runtime.environment)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(AGENT_SITE), env.get("PYTHONPATH"))))
    env.update({"HOME": str(home), "TMPDIR": str(tmpdir)})
    if port is not None:
        env["PORT"] = str(port)
    return env


async def _exec(command: tuple[str, ...], *, env: dict[str, str], cwd: Path, out: IO[bytes] | IO[str]) -> ProcessHandle:
    try:
        return await asyncio.create_subprocess_exec(
            *command,
            cwd=cwd,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    except OSError as e:
        raise RuntimeClientError(f"could not start the agent process {command[0]!r}: {e}") from e


def _limit_memory(pid: int, megabytes: int) -> None:
    """Cap the address space of process ``pid`` (and of every process it starts later) at ``megabytes`` MiB.

    Set just after the start, before the agent has imported much: a microVM's memory is fixed from its first
    instruction, and a fork server's template (which imported the preloaded modules) stays unlimited.

    Raises:
        RuntimeClientError: the limit could not be set (the process is gone, or the OS refused it).
    """
    limit = megabytes * 1024 * 1024
    try:
        resource.prlimit(pid, resource.RLIMIT_AS, (limit, limit))
    except (OSError, ValueError) as e:
        raise RuntimeClientError(f"could not limit the agent process's memory to {megabytes} MiB: {e}") from e


def _lower_priority(pid: int, increment: int) -> None:
    """Make process ``pid`` ``increment`` nicer than this one, as ``nice -n`` would (never below this process's
    niceness, so it needs no privilege): each of its threads, since Linux's niceness is a thread's, and the threads
    and processes it starts later inherit it. Set just after the start, as :func:`_limit_memory`.

    Raises:
        RuntimeClientError: the niceness could not be set (the process is gone, or the OS refused it).
    """
    nice = min(19, os.getpriority(os.PRIO_PROCESS, 0) + increment)
    tasks = Path(f"/proc/{pid}/task")
    try:
        threads = [int(task.name) for task in tasks.iterdir()] if tasks.is_dir() else [pid]
        for thread in threads:
            with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
                os.setpriority(os.PRIO_PROCESS, thread, nice)
    except OSError as e:
        raise RuntimeClientError(f"could not make the agent process {increment} nicer: {e}") from e


def listening_ports(pgid: int) -> set[int]:
    """TCP ports on which processes of process group ``pgid`` listen (read from Linux ``/proc``; empty elsewhere)."""
    proc = Path("/proc")
    inodes: set[str] = set()
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
            if int(fields[2]) != pgid:
                continue
            for fd in (stat.parent / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[len("socket:[") : -1])
        except (OSError, IndexError, ValueError):
            continue
    ports: set[int] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / str(pgid) / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            columns = line.split()
            if len(columns) > 9 and columns[3] == _TCP_LISTEN and columns[9] in inodes:
                ports.add(int(columns[1].rpartition(":")[2], 16))
    return ports


#: Ports given to agent processes that have not ended. The OS hands out a port that is free now; two sessions
#: started at once could both be given one before either agent binds it, and the loser's ``/ping`` (and its
#: invocation) would then reach the other session's agent.
_PORTS_GIVEN: set[int] = set()
_PORT_TRIES = 100


def _os_free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def reserve_port(pick: Callable[[], int] = _os_free_port) -> int:
    """A free port no live agent process was given; hold it until :func:`release_port`."""
    for _ in range(_PORT_TRIES):
        port = pick()
        if port not in _PORTS_GIVEN:
            _PORTS_GIVEN.add(port)
            return port
    raise RuntimeClientError(f"no free port after {_PORT_TRIES} tries that no other session holds")


def release_port(port: int) -> None:
    """Give a port back once the agent process that held it has ended."""
    _PORTS_GIVEN.discard(port)


class AgentProcess:
    """A started agent process. Create with :meth:`spawn`; end with :meth:`terminate` or :meth:`kill`."""

    def __init__(self, proc: ProcessHandle, *, port: int, root: Path, log: IO[bytes] | None) -> None:
        self._proc = proc
        self.port = port
        self.root = root
        self._log = log
        self.created_at = time.time()

    @classmethod
    async def spawn(
        cls,
        runtime: RuntimeConfig,
        *,
        deadline: float,
        log_dir: Path | None = None,
        fork_server: ForkServer | None = None,
    ) -> AgentProcess:
        """Start ``runtime.command`` in a fresh directory tree on a free port.

        Args:
            runtime: what to run.
            deadline: ``time.monotonic()`` by which a fork server must have forked it (``exec`` is immediate).
            log_dir: output goes to ``log_dir/<root>.log`` when set, else to the emulator's stderr.
            fork_server: fork the process from this runtime's template instead of ``exec``-ing the command.

        Raises:
            RuntimeClientError: the command could not be started (missing executable, bad working dir, a fork
                server that cannot preload or has died).
        """
        root = Path(tempfile.mkdtemp(prefix="acr-session-"))
        home, tmpdir, work = root / "home", root / "tmp", root / "work"
        for d in (home, tmpdir, work):
            d.mkdir()
        port = reserve_port()
        env = agent_environment(runtime, port=port, home=home, tmpdir=tmpdir)
        cwd = runtime.working_dir or work
        log_path = log_dir / f"{root.name}.log" if log_dir else None
        log = None
        proc: ProcessHandle | None = None
        try:
            if fork_server is not None:
                proc = await fork_server.spawn(env=env, cwd=cwd, log=log_path, deadline=deadline)
            else:
                log = open(log_path, "ab") if log_path else None
                proc = await _exec(runtime.command, env=env, cwd=cwd, out=log or sys.stderr)
            if runtime.memory_limit_mb is not None:
                _limit_memory(proc.pid, runtime.memory_limit_mb)
            if runtime.nice:
                _lower_priority(proc.pid, runtime.nice)
        except BaseException:
            if proc is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            if log:
                log.close()
            shutil.rmtree(root, ignore_errors=True)
            release_port(port)
            raise
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
        started = time.monotonic()
        while True:
            if self.returncode is not None:
                raise RuntimeClientError(
                    f"the agent process exited with code {self.returncode} during start-up (see its log; an agent "
                    "that listens on a fixed port other than 8080 or $PORT collides with other sessions)"
                )
            if await self.ping(client, timeout=max(0.1, min(1.0, deadline - time.monotonic()))) is not None:
                return
            if time.monotonic() - started >= _WRONG_PORT_GRACE_S:
                elsewhere = listening_ports(self.pid) - {self.port}
                if elsewhere:
                    raise RuntimeClientError(
                        f"the agent listens on port {', '.join(map(str, sorted(elsewhere)))} but not on its PORT "
                        f"({self.port}): serve on 8080 (ACR's port) or on the port the PORT environment variable "
                        "names. Each emulated session gets its own port on one host, and a Python agent's bind to "
                        "8080 is mapped onto it (ACR gives each session its own microVM on 8080)"
                    )
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
        release_port(self.port)

    def _signal_group(self, sig: signal.Signals) -> None:
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            return
