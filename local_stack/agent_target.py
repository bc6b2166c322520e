"""Your own agent on the local stack: ``rollouts local up --agent TARGET`` and ``rollouts demo --agent TARGET``.

``TARGET`` is an agent written for ACR, given as ``FILE[:NAME]`` or ``MODULE:NAME`` (an ``AgentCoreRLApp``,
or a stock ``BedrockAgentCoreApp`` with ``@app.entrypoint``). :func:`target_agent` makes the
:class:`~local_stack.hosting.LocalAgent` whose sessions run :mod:`local_stack.agent_launcher` on it, and
:func:`check_agent` starts one session's process the way the emulator would, before anything else starts,
so a missing file, a file without an app, an import that raises (its traceback) or an agent that never
answers ``/ping`` is a clear error and no stack is left behind.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from local_stack._process import LOCALHOST, ManagedProcess, ProcessStartError, free_port, http_ready
from local_stack.agent_launcher import AgentTargetError, parse_target
from local_stack.hosting import LocalAgent, validate_agent_name
from local_stack.stack import agent_runtime, runtime_arn
from rollout_contract.protocol import STARTUP_LIMIT_S

__all__ = ["AgentStartError", "AgentTargetError", "check_agent", "parse_env", "target_agent"]

#: What every session of a target imports before the agent itself (the emulator's fork server imports it once;
#: :mod:`agent_app.preload` also parses what the result writer's S3 client needs).
LAUNCHER_PRELOAD = ("agent_app.preload",)
#: How long :func:`check_agent` waits for ``/ping`` by default: ACR's limit on a session's initialization.
DEFAULT_START_TIMEOUT_S = float(STARTUP_LIMIT_S)
_LOG_LINES_SHOWN = 60


class AgentStartError(RuntimeError):
    """The agent's process exited or never answered ``/ping``; the message holds what it printed."""


def target_agent(
    target: str | os.PathLike[str],
    *,
    name: str | None = None,
    working_dir: str | os.PathLike[str] | None = None,
    environment: Mapping[str, str] | None = None,
) -> LocalAgent:
    """The :class:`LocalAgent` that serves ``target`` (``FILE[:NAME]`` or ``MODULE:NAME``) in every session.

    Args:
        target: the agent.
        name: its runtime name (default: the file's folder, or the module's first part, made ACR-safe).
        working_dir: where its sessions start (default: the file's folder; for a module, the current directory).
        environment: more variables for its sessions (``--agent-env K=V``).

    Raises:
        AgentTargetError: the file does not exist, or ``target`` is neither a file nor ``MODULE:NAME``.
        ValueError: ``name`` breaks ACR's rule for runtime names.
    """
    text = os.fspath(target)
    file, module, attribute = parse_target(text)
    env = dict(environment or {})
    if file is not None:
        file = file.resolve()
        spec = f"{file}:{attribute}" if attribute else str(file)
        home = file.parent
        default_name = file.parent.name
    else:
        assert module is not None
        spec = text
        home = Path.cwd()
        default_name = module.partition(".")[0]
        # The module is imported from where the command runs, as `python -m` would.
        env["PYTHONPATH"] = os.pathsep.join([str(home), *([env["PYTHONPATH"]] if "PYTHONPATH" in env else [])])
    return LocalAgent(
        name=validate_agent_name(name) if name is not None else _runtime_name(default_name),
        command=(sys.executable, "-m", "local_stack.agent_launcher", spec),
        preload=LAUNCHER_PRELOAD,
        working_dir=Path(os.fspath(working_dir)).resolve() if working_dir is not None else home,
        environment=env,
    )


def _runtime_name(text: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_]", "_", text).lstrip("_0123456789")[:48]
    return name or "agent"


def parse_env(pairs: list[str] | None) -> dict[str, str]:
    """``["K=V", ...]`` (``--agent-env``) as a mapping.

    Raises:
        ValueError: an item without ``=`` or with an empty name.
    """
    env: dict[str, str] = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--agent-env {pair!r} is not NAME=VALUE")
        env[key] = value
    return env


def check_agent(
    agent: LocalAgent, *, run_dir: str | os.PathLike[str], timeout_s: float = DEFAULT_START_TIMEOUT_S
) -> None:
    """Start one session's process of ``agent`` as the emulator would and wait until it answers ``/ping``.

    The process gets a session's environment (the stack's variables but the S3 endpoint, the agent's own,
    its own ``HOME``, ``TMPDIR`` and ``PORT``) and working directory; it is stopped after.

    Raises:
        AgentStartError: it exited (with what it printed: the launcher's reason or the import's traceback),
            or it did not answer ``/ping`` within ``timeout_s``.
    """
    from local_stack.acr_emulator.config import RuntimeConfig
    from local_stack.acr_emulator.process import agent_environment

    run_dir = Path(os.fspath(run_dir))
    settings = agent.settings(run_dir=run_dir)
    runtime = RuntimeConfig.model_validate(agent_runtime(settings, runtime_arn("check", agent.name), None))
    root = Path(tempfile.mkdtemp(prefix="agent-check-"))
    home, tmpdir = root / "home", root / "tmp"
    home.mkdir()
    tmpdir.mkdir()
    port = free_port()
    process = ManagedProcess(
        name=f"agent {agent.name}",
        argv=list(runtime.command),
        log_path=run_dir / "agent-check.log",
        env=agent_environment(runtime, port=port, home=home, tmpdir=tmpdir),
        cwd=runtime.working_dir,
        ready=http_ready(f"http://{LOCALHOST}:{port}/ping"),
    )
    process.log_path.unlink(missing_ok=True)
    try:
        process.start()
        process.wait_ready(timeout_s)
    except ProcessStartError as exc:
        output = process.log_tail(_LOG_LINES_SHOWN)
        if process.alive():
            raise AgentStartError(
                f"the agent did not answer GET /ping on its PORT within {timeout_s:g} s (ACR allows "
                f"{STARTUP_LIMIT_S} s to start); raise --agent-start-timeout if it is slow to import, or check "
                f"that it serves the app it defines. It printed ({process.log_path}):\n{output}"
            ) from exc
        raise AgentStartError(f"the agent exited before it served /ping:\n{output}") from exc
    finally:
        process.stop(grace_s=2.0)
        shutil.rmtree(root, ignore_errors=True)
