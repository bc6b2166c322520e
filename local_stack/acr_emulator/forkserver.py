"""The fork-server start mode: a runtime's template process imports its ``preload`` modules once, then forks
one agent process per session (copy-on-write), so a session start no longer pays the agent's imports.

The template (``_template.py``, standard library only) runs with the runtime's interpreter in its own process
group, a scrubbed environment (the runtime's, without ``PORT``) and its own ``HOME``/``TMPDIR``; it talks JSON
lines over its stdin/stdout. Its output goes to the emulator's stderr. It starts no thread or event loop, reaps
its children and reports each child's pid and exit. A template that dies is launched again by the next session
start (each launch is logged); the agent processes it had forked are SIGKILLed, so their sessions end as crashed.
A template whose preload fails makes that start fail with 424 ``RuntimeClientError`` naming the module.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from local_stack.acr_emulator.errors import RuntimeClientError
from local_stack.acr_emulator.process import agent_environment

if TYPE_CHECKING:
    from local_stack.acr_emulator.config import RuntimeConfig

__all__ = ["ForkServer", "ForkedChild"]

logger = logging.getLogger(__name__)

_TEMPLATE_SCRIPT = Path(__file__).with_name("_template.py")
_CLOSE_TIMEOUT_S = 5.0
_request_ids = itertools.count(1)


class ForkedChild:
    """An agent process forked by a template: its pid, and its exit code once the template has reaped it."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._exited = asyncio.Event()

    async def wait(self) -> int:
        """Wait for the process to end; return its exit code (negative: the signal that ended it)."""
        await self._exited.wait()
        assert self.returncode is not None
        return self.returncode

    def set_exited(self, returncode: int) -> None:
        """Record the exit (the first report wins)."""
        if self.returncode is None:
            self.returncode = returncode
            self._exited.set()


class ForkServer:
    """A runtime's template process, launched at :meth:`start` and again on demand after it has died.

    Args:
        runtime: a runtime with a non-empty ``preload``.
    """

    def __init__(self, runtime: RuntimeConfig) -> None:
        self.runtime = runtime
        self.launches = 0
        self._template: _Template | None = None

    def start(self) -> None:
        """Launch the template now, so its imports overlap with whatever comes before the first session."""
        self._current()

    async def spawn(self, *, env: dict[str, str], cwd: Path, log: Path | None, deadline: float) -> ForkedChild:
        """Fork one agent process running the runtime's command.

        Args:
            env: its complete environment.
            cwd: its working directory.
            log: file its stdout and stderr append to; None: the emulator's stderr.
            deadline: ``time.monotonic()`` by which it must have been forked (template launch included).

        Raises:
            RuntimeClientError: the template could not preload, died, refused the request or was too slow.
        """
        template = self._current()
        try:
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                await asyncio.shield(template.ready)
                return await template.fork({"env": env, "cwd": str(cwd), "log": str(log) if log else None})
        except TimeoutError as e:
            raise RuntimeClientError(
                f"the fork server of {self.runtime.arn} did not fork an agent within the start-up limit"
            ) from e

    def view(self) -> dict[str, Any]:
        """The admin view: the current template's pid, whether it is ready, its live children, launches so far."""
        template = self._template
        live = template if template is not None and not template.gone else None
        return {
            "pid": live.pid if live else None,
            "ready": live is not None and live.ready.done() and live.ready.exception() is None,
            "children": len(live.children) if live else 0,
            "launches": self.launches,
        }

    async def close(self) -> None:
        """End the template (it has no children left once every session has ended) and wait for it."""
        if self._template is not None:
            await self._template.close()

    def kill_now(self) -> None:
        """SIGKILL the template at once (a synchronous backstop when the event loop is gone)."""
        if self._template is not None:
            self._template.kill_now()

    def _current(self) -> _Template:
        if self._template is None or self._template.gone:
            self.launches += 1
            logger.info(
                "launching the fork server of %s (preload: %s)", self.runtime.arn, ",".join(self.runtime.preload)
            )
            self._template = _Template(self.runtime)
        return self._template


class _Template:
    """One launch of a template process and its channel; ``gone`` once it has exited."""

    def __init__(self, runtime: RuntimeConfig) -> None:
        self.runtime = runtime
        self.root = Path(tempfile.mkdtemp(prefix="acr-forkserver-"))
        for name in ("home", "tmp", "work"):
            (self.root / name).mkdir()
        self.environment = agent_environment(runtime, port=None, home=self.root / "home", tmpdir=self.root / "tmp")
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.ready.add_done_callback(lambda f: f.cancelled() or f.exception())
        self.pending: dict[int, asyncio.Future[ForkedChild]] = {}
        self.children: dict[int, ForkedChild] = {}
        self.gone = False
        self._closing = False
        self._proc: asyncio.subprocess.Process | None = None
        self._launched = asyncio.Event()
        self._task = asyncio.ensure_future(self._run())

    @property
    def pid(self) -> int | None:
        """The template's pid once launched."""
        return self._proc.pid if self._proc else None

    async def fork(self, request: dict[str, Any]) -> ForkedChild:
        """Send one spawn request and wait for the forked child."""
        if self.gone or self._proc is None or self._proc.stdin is None:
            raise RuntimeClientError(f"the fork server of {self.runtime.arn} has exited")
        request_id = next(_request_ids)
        future: asyncio.Future[ForkedChild] = asyncio.get_running_loop().create_future()
        self.pending[request_id] = future
        try:
            self._proc.stdin.write((json.dumps({"op": "spawn", "id": request_id, **request}) + "\n").encode())
            return await future
        finally:
            self.pending.pop(request_id, None)

    async def close(self) -> None:
        self._closing = True
        await self._launched.wait()
        if self._proc is None:
            return
        if not self.ready.done():
            self._signal(signal.SIGKILL)
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout=_CLOSE_TIMEOUT_S)
        except TimeoutError:
            logger.warning("the fork server of %s did not exit on close; killing it", self.runtime.arn)
            self._signal(signal.SIGKILL)
            await self._task

    def kill_now(self) -> None:
        self._signal(signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)

    async def _run(self) -> None:
        try:
            self._proc = await asyncio.create_subprocess_exec(
                self.runtime.command[0],
                str(_TEMPLATE_SCRIPT),
                self.runtime.arn,
                cwd=self.runtime.working_dir or self.root / "work",
                env=self.environment,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as e:
            self._exited(RuntimeClientError(f"could not start the fork server {self.runtime.command[0]!r}: {e}"))
            return
        finally:
            self._launched.set()
        assert self._proc.stdin is not None and self._proc.stdout is not None
        init = {"command": list(self.runtime.command[1:]), "preload": list(self.runtime.preload)}
        self._proc.stdin.write((json.dumps(init) + "\n").encode())
        try:
            while line := await self._proc.stdout.readline():
                self._dispatch(json.loads(line))
        except (ValueError, KeyError) as e:
            logger.error("the fork server of %s sent a malformed message (%r); killing it", self.runtime.arn, e)
            self._signal(signal.SIGKILL)
        returncode = await self._proc.wait()
        self._exited(RuntimeClientError(f"the fork server of {self.runtime.arn} exited with code {returncode}"))

    def _dispatch(self, message: dict[str, Any]) -> None:
        event = message["event"]
        if event == "ready":
            self.ready.set_result(None)
            logger.info("the fork server of %s is ready (pid %s)", self.runtime.arn, message["pid"])
        elif event == "failed":
            logger.error("the fork server of %s could not preload: %s", self.runtime.arn, message["error"])
            self.ready.set_exception(
                RuntimeClientError(f"the fork server of {self.runtime.arn} could not preload: {message['error']}")
            )
        elif event == "spawned":
            child = self.children[message["pid"]] = ForkedChild(message["pid"])
            future = self.pending.get(message["id"])
            if future is None or future.done():
                _kill_group(child.pid)
            else:
                future.set_result(child)
        elif event == "spawn_failed":
            future = self.pending.get(message["id"])
            if future is not None and not future.done():
                future.set_exception(
                    RuntimeClientError(f"the fork server could not start the agent: {message['error']}")
                )
        elif event == "exited":
            exited = self.children.pop(message["pid"], None)
            if exited is not None:
                exited.set_exited(message["returncode"])

    def _exited(self, error: RuntimeClientError) -> None:
        self.gone = True
        was_ready = self.ready.done() and self.ready.exception() is None
        if not self.ready.done():
            self.ready.set_exception(error)
        for future in self.pending.values():
            if not future.done():
                future.set_exception(error)
        orphans = list(self.children.values())
        self.children.clear()
        for child in orphans:
            _kill_group(child.pid)
            child.set_exited(-signal.SIGKILL)
        if was_ready and not self._closing:
            logger.warning(
                "%s; killed the %d agent process(es) it had forked; the next session start launches a new one",
                error.message,
                len(orphans),
            )
        shutil.rmtree(self.root, ignore_errors=True)

    def _signal(self, sig: signal.Signals) -> None:
        if self._proc is not None and self._proc.returncode is None:
            try:
                os.kill(self._proc.pid, sig)
            except ProcessLookupError:
                return


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return
