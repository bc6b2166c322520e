"""Sessions: one agent process each, started on first invoke, ended by stop, idle, max lifetime or crash.

A session id that comes back after its session ended starts a fresh session (new process, new
directories), as ACR gives a new microVM to a session id whose previous one is gone.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, deque
from collections.abc import Coroutine
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import httpx

from local_stack.acr_emulator.errors import NotFoundError, RuntimeClientError, SessionQuotaExceededError, ThrottledError
from local_stack.acr_emulator.forkserver import ForkServer
from local_stack.acr_emulator.process import AgentProcess, PingReport
from local_stack.acr_emulator.quotas import TokenBucket
from rollout_contract.protocol import PingStatus

if TYPE_CHECKING:
    from local_stack.acr_emulator.config import EmulatorConfig, RuntimeConfig

__all__ = ["EndReason", "Session", "SessionManager", "SessionState"]

logger = logging.getLogger(__name__)


class SessionState(StrEnum):
    """Where an emulated session is in its life."""

    STARTING = "starting"
    ACTIVE = "active"
    STOPPING = "stopping"
    ENDED = "ended"


class EndReason(StrEnum):
    """Why a session ended."""

    STOPPED = "stopped"
    IDLE_TIMEOUT = "idle_timeout"
    MAX_LIFETIME = "max_lifetime"
    CRASHED = "crashed"
    STARTUP_FAILED = "startup_failed"
    SHUTDOWN = "emulator_shutdown"


_COUNTERS = (
    "invokes",
    "throttles",
    "throttle_storms",
    "quota_rejections",
    "stops",
    "starts",
    "warm_starts",
    "startup_failures",
    "crashes",
    "idle_expirations",
    "lifetime_expirations",
    "agent_errors",
)
_END_COUNTER = {
    EndReason.CRASHED: "crashes",
    EndReason.IDLE_TIMEOUT: "idle_expirations",
    EndReason.MAX_LIFETIME: "lifetime_expirations",
    EndReason.STARTUP_FAILED: "startup_failures",
}


@dataclass(eq=False)
class Session:
    """One emulated runtime session."""

    session_id: str
    runtime: RuntimeConfig
    ready: asyncio.Future[None]
    state: SessionState = SessionState.STARTING
    process: AgentProcess | None = None
    started_at: float = field(default_factory=time.time)
    started_mono: float = field(default_factory=time.monotonic)
    last_activity: float = field(default_factory=time.monotonic)
    in_flight: int = 0
    last_ping_status: str | None = None
    last_ping_at: float | None = None
    last_ping_update: float | None = None
    end_reason: EndReason | None = None
    ended_at: float | None = None
    monitor: asyncio.Task[None] | None = None
    ended: asyncio.Event = field(default_factory=asyncio.Event)

    def touch(self) -> None:
        """Record activity now (resets the idle clock)."""
        self.last_activity = time.monotonic()

    def view(self) -> dict[str, Any]:
        """The admin view of this session."""
        end = self.ended_at or time.time()
        return {
            "session_id": self.session_id,
            "runtime_arn": self.runtime.arn,
            "state": self.state.value,
            "pid": self.process.pid if self.process else None,
            "port": self.process.port if self.process else None,
            "age_s": round(end - self.started_at, 3),
            "in_flight": self.in_flight,
            "last_ping_status": self.last_ping_status,
            "last_ping_at": self.last_ping_at,
            "end_reason": self.end_reason.value if self.end_reason else None,
        }


class SessionManager:
    """Owns every session, the warm pools, the quotas and the counters of one emulator.

    Call :meth:`start` inside the event loop before use and :meth:`close` at the end: it ends every process.
    """

    def __init__(self, config: EmulatorConfig) -> None:
        self.config = config
        self.counters: Counter[str] = Counter(dict.fromkeys(_COUNTERS, 0))
        self._sessions: dict[tuple[str, str], Session] = {}
        self._ended: deque[Session] = deque(maxlen=config.ended_sessions_kept)
        #: One bucket per endpoint (runtime ARN, qualifier): ACR counts invocations per endpoint.
        self._buckets = {(r.arn, q): TokenBucket(r.invoke_tps) for r in config.runtimes for q in r.qualifiers}
        #: A throttle storm: until when, and the lowered shared bucket (see :meth:`throttle`).
        self._storm: tuple[float, TokenBucket] | None = None
        self._invocations = {r.arn: deque[float](maxlen=config.invocation_log_size) for r in config.runtimes}
        #: Every call that took a token (time, "invoke" or "stop", session id), per endpoint: how full each bucket
        #: was kept, and when each session was stopped.
        self._calls = {
            (r.arn, q): deque[tuple[float, str, str]](maxlen=config.invocation_log_size)
            for r in config.runtimes
            for q in r.qualifiers
        }
        self._warm: dict[str, deque[AgentProcess]] = {r.arn: deque() for r in config.runtimes}
        self._warm_pending: Counter[str] = Counter()
        self._fork_servers = {r.arn: ForkServer(r) for r in config.runtimes if r.preload}
        self._tasks: set[asyncio.Task[None]] = set()
        self._processes: set[AgentProcess] = set()
        self._closed = False
        self.client = httpx.AsyncClient(trust_env=False, limits=httpx.Limits(max_connections=None))

    async def start(self) -> None:
        """Launch the fork servers and fill the warm pools."""
        for fork_server in self._fork_servers.values():
            fork_server.start()
        for runtime in self.config.runtimes:
            self._refill(runtime)

    async def close(self) -> None:
        """End every session, warm process and fork server and wait for them to exit."""
        self._closed = True
        await asyncio.gather(*(self._end(s, EndReason.SHUTDOWN) for s in list(self._sessions.values())))
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(*(self._end(s, EndReason.SHUTDOWN) for s in list(self._sessions.values())))
        await asyncio.gather(*(self._retire(p, 0) for p in list(self._processes)))
        await asyncio.gather(*(f.close() for f in self._fork_servers.values()))
        await self.client.aclose()

    def kill_all_now(self) -> None:
        """SIGKILL every process group and fork server at once (a synchronous backstop when the loop is gone)."""
        for process in self._processes:
            process.kill()
            process.cleanup()
        for fork_server in self._fork_servers.values():
            fork_server.kill_now()

    def take_token(self, runtime: RuntimeConfig, qualifier: str, call: str, session_id: str) -> None:
        """Spend one of endpoint ``qualifier``'s data-plane tokens for ``call`` (``"invoke"`` or ``"stop"``) of
        ``session_id``; each endpoint has its own rate.

        Raises:
            ThrottledError: the endpoint's rate is exhausted.
        """
        storm = self._storm
        if storm is not None and time.monotonic() >= storm[0]:
            storm = self._storm = None
        bucket = storm[1] if storm is not None else self._buckets[(runtime.arn, qualifier)]
        if not bucket.try_take():
            self.counters["throttles"] += 1
            raise ThrottledError(
                f"Rate exceeded: {bucket.rate:g} requests per second for endpoint {qualifier} of {runtime.arn}"
            )
        self._calls[(runtime.arn, qualifier)].append((time.time(), call, session_id))

    def throttle(self, invoke_tps: float, seconds: float) -> None:
        """Lower every runtime's invoke (and stop) rate to ``invoke_tps`` in total for ``seconds`` (a fault)."""
        bucket = TokenBucket(invoke_tps)
        while bucket.try_take():  # the storm starts with an empty bucket
            pass
        self._storm = (time.monotonic() + seconds, bucket)
        self.counters["throttle_storms"] += 1

    def record_invoke(self, runtime: RuntimeConfig) -> None:
        """Log an accepted invoke."""
        self.counters["invokes"] += 1
        self._invocations[runtime.arn].append(time.time())

    def has_session(self, runtime: RuntimeConfig, session_id: str) -> bool:
        """Whether ``session_id`` of ``runtime`` is active (an invoke to it starts no new session)."""
        return (runtime.arn, session_id) in self._sessions

    async def acquire(self, runtime: RuntimeConfig, session_id: str) -> Session:
        """The active session ``session_id`` of ``runtime``, started now if it does not exist.

        Raises:
            SessionQuotaExceededError: a new session would exceed the active-session quota.
            RuntimeClientError: the new session's agent did not become ready.
        """
        key = (runtime.arn, session_id)
        session = self._sessions.get(key)
        while session and session.process and session.process.returncode is not None:
            await self._end(session, EndReason.CRASHED)
            session = self._sessions.get(key)
        if session is None:
            if len(self._sessions) >= self.config.max_active_sessions:
                self.counters["quota_rejections"] += 1
                raise SessionQuotaExceededError(
                    f"maxVms limit exceeded: {self.config.max_active_sessions} active sessions; "
                    "stop finished sessions or retry later"
                )
            session = self._new_session(runtime, session_id)
        await asyncio.shield(session.ready)
        return session

    async def stop(self, runtime: RuntimeConfig, session_id: str) -> None:
        """End a session (SIGTERM, then SIGKILL after the runtime's grace period).

        Raises:
            NotFoundError: no such active session.
        """
        session = self._sessions.get((runtime.arn, session_id))
        if session is None:
            raise NotFoundError(f"Session {session_id} not found for {runtime.arn}")
        self.counters["stops"] += 1
        await asyncio.wait([session.ready])
        await self._end(session, EndReason.STOPPED)

    async def kill(self, session_id: str) -> bool:
        """SIGKILL a session's process group (fault injection) and wait until the session has ended."""
        killed = False
        for session in [s for (_, sid), s in self._sessions.items() if sid == session_id]:
            if session.process:
                session.process.kill()
                await session.process.wait()
                await self._end(session, EndReason.CRASHED)
                killed = True
        return killed

    def sessions_view(self) -> list[dict[str, Any]]:
        """Live sessions, then recently ended ones (newest first)."""
        return [s.view() for s in self._sessions.values()] + [s.view() for s in reversed(self._ended)]

    def stats_view(self) -> dict[str, Any]:
        """Counters, active sessions, warm pool sizes and the fork servers (runtimes with ``preload``)."""
        return {
            "counters": dict(self.counters),
            "active_sessions": len(self._sessions),
            "max_active_sessions": self.config.max_active_sessions,
            "warm_pool": {arn: len(pool) for arn, pool in self._warm.items()},
            "fork_servers": {arn: fork_server.view() for arn, fork_server in self._fork_servers.items()},
        }

    def invocations_view(self) -> dict[str, list[float]]:
        """Accepted invoke times (unix seconds) per runtime ARN."""
        return {arn: list(log) for arn, log in self._invocations.items()}

    def calls_view(self) -> dict[str, dict[str, list[tuple[float, str, str]]]]:
        """Calls that took a token (unix seconds, ``"invoke"`` or ``"stop"``, session id) per runtime ARN and
        endpoint."""
        view: dict[str, dict[str, list[tuple[float, str, str]]]] = {}
        for (arn, qualifier), log in self._calls.items():
            view.setdefault(arn, {})[qualifier] = list(log)
        return view

    def _new_session(self, runtime: RuntimeConfig, session_id: str) -> Session:
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        ready.add_done_callback(lambda f: f.cancelled() or f.exception())
        session = Session(session_id=session_id, runtime=runtime, ready=ready)
        self._sessions[(runtime.arn, session_id)] = session
        self._spawn_task(self._start_session(session))
        return session

    async def _start_session(self, session: Session) -> None:
        runtime = session.runtime
        try:
            process = self._take_warm(runtime) or await self._cold_start(runtime)
        except RuntimeClientError as e:
            session.ready.set_exception(e)
            await self._end(session, EndReason.STARTUP_FAILED)
            return
        except asyncio.CancelledError:
            session.ready.set_exception(RuntimeClientError("the emulator is shutting down"))
            raise
        if session.state is not SessionState.STARTING:
            session.ready.set_exception(RuntimeClientError(f"session {session.session_id} ended while starting"))
            await self._retire(process, 0)
            return
        self.counters["starts"] += 1
        session.process = process
        session.state = SessionState.ACTIVE
        session.started_mono = time.monotonic()
        session.touch()
        session.monitor = self._spawn_task(self._monitor(session))
        session.ready.set_result(None)
        self._refill(runtime)

    async def _cold_start(self, runtime: RuntimeConfig) -> AgentProcess:
        deadline = time.monotonic() + runtime.startup_limit_s
        delay = runtime.cold_start_delay.sample()
        await asyncio.sleep(min(delay, runtime.startup_limit_s))
        if delay >= runtime.startup_limit_s:
            raise RuntimeClientError(
                f"the runtime was not ready within its start-up limit of {runtime.startup_limit_s:g}s"
            )
        process = await AgentProcess.spawn(
            runtime, deadline=deadline, log_dir=self.config.log_dir, fork_server=self._fork_servers.get(runtime.arn)
        )
        self._processes.add(process)
        try:
            await process.wait_ready(self.client, deadline)
        except BaseException as e:
            await self._retire(process, 0)
            if isinstance(e, RuntimeClientError):
                raise RuntimeClientError(f"{e.message} (runtime {runtime.arn})") from e
            raise
        return process

    def _take_warm(self, runtime: RuntimeConfig) -> AgentProcess | None:
        pool = self._warm[runtime.arn]
        while pool:
            process = pool.popleft()
            if process.returncode is None:
                self.counters["warm_starts"] += 1
                return process
            process.cleanup()
            self._processes.discard(process)
        return None

    def _refill(self, runtime: RuntimeConfig) -> None:
        missing = runtime.warm_pool_size - len(self._warm[runtime.arn]) - self._warm_pending[runtime.arn]
        for _ in range(max(0, missing) if not self._closed else 0):
            self._warm_pending[runtime.arn] += 1
            self._spawn_task(self._add_warm(runtime))

    async def _add_warm(self, runtime: RuntimeConfig) -> None:
        try:
            process = await self._cold_start(runtime)
        except RuntimeClientError as e:
            self.counters["startup_failures"] += 1
            logger.warning("warm pool process for %s failed to start: %s", runtime.arn, e.message)
            return
        finally:
            self._warm_pending[runtime.arn] -= 1
        self._warm[runtime.arn].append(process)

    async def _monitor(self, session: Session) -> None:
        process, runtime = session.process, session.runtime
        assert process is not None
        exited = asyncio.ensure_future(process.wait())
        try:
            while True:
                await asyncio.wait([exited], timeout=runtime.ping_interval_s)
                if exited.done():
                    await self._end(session, EndReason.CRASHED)
                    return
                self._observe_ping(session, await process.ping(self.client))
                now = time.monotonic()
                if now - session.started_mono >= runtime.max_lifetime_s:
                    await self._end(session, EndReason.MAX_LIFETIME)
                    return
                if now - session.last_activity >= runtime.idle_timeout_s:
                    await self._end(session, EndReason.IDLE_TIMEOUT)
                    return
        finally:
            exited.cancel()

    @staticmethod
    def _observe_ping(session: Session, report: PingReport | None) -> None:
        if report is None:
            session.last_ping_status = "unreachable"
            return
        session.last_ping_status = report.status
        session.last_ping_at = time.time()
        moved = session.last_ping_update is not None and report.time_of_last_update != session.last_ping_update
        session.last_ping_update = report.time_of_last_update
        if report.status == PingStatus.HEALTHY_BUSY or moved or session.in_flight:
            session.touch()

    async def _end(self, session: Session, reason: EndReason) -> None:
        if session.state in (SessionState.STOPPING, SessionState.ENDED):
            await session.ended.wait()
            return
        session.state = SessionState.STOPPING
        session.end_reason = reason
        self._sessions.pop((session.runtime.arn, session.session_id), None)
        if reason in _END_COUNTER:
            self.counters[_END_COUNTER[reason]] += 1
        if session.monitor and session.monitor is not asyncio.current_task():
            session.monitor.cancel()
        if session.process:
            await self._retire(session.process, session.runtime.stop_grace_s)
        session.state = SessionState.ENDED
        session.ended_at = time.time()
        self._ended.append(session)
        session.ended.set()
        logger.info("session %s of %s ended: %s", session.session_id, session.runtime.arn, reason.value)

    async def _retire(self, process: AgentProcess, grace_s: float) -> None:
        await process.terminate(grace_s)
        self._processes.discard(process)

    def _spawn_task(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task
