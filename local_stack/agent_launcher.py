"""Serve an agent written for ACR on ``127.0.0.1:$PORT``: ``python -m local_stack.agent_launcher TARGET``.

What each emulator session runs for ``rollouts local up --agent TARGET``. ``TARGET`` is ``FILE[:NAME]`` or
``MODULE:NAME``; without a name the file or module must hold exactly one app at module level (an instance of
``bedrock_agentcore``'s ``BedrockAgentCoreApp``, ``AgentCoreRLApp`` included). The launcher imports the
target, as ``python FILE`` would minus its ``if __name__ == "__main__"`` block (the file's folder first on
``sys.path``), and serves the app it found with the SDK's own ``run`` on the session's port.

- An app with a rollout entrypoint (``agent_app.AgentCoreRLApp``, ART's) is served as it is.
- A stock ``BedrockAgentCoreApp`` with ``@app.entrypoint`` (the deployment form) is served as a rollout: its
  handler runs in the background and what it returns is the stored result (a dict as it is, anything else
  as ``{"response": value}``; a generator's items as a list).

Exit codes: 2 the target names no usable app (missing file, no app, several), 3 the agent's import raised
(its traceback on stderr).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["AgentTargetError", "find_app", "main", "parse_target", "rollout_app"]

EXIT_NO_APP = 2
EXIT_IMPORT_FAILED = 3
#: Where the wrapped result of a stock entrypoint that returned something other than a dict goes.
RESPONSE_FIELD = "response"


class AgentTargetError(ValueError):
    """The target names no usable app; the message says what is wrong and what to do."""


def parse_target(target: str) -> tuple[Path | None, str | None, str | None]:
    """Split ``FILE[:NAME]`` or ``MODULE[:NAME]`` into ``(file, module, name)`` (one of file and module set).

    Raises:
        AgentTargetError: a file target whose file does not exist.
    """
    if Path(target).is_file():
        return Path(target), None, None
    head, colon, name = target.rpartition(":")
    location, name_given = (head, name) if colon else (target, None)
    if location.endswith(".py") or os.sep in location or Path(location).exists():
        path = Path(location)
        if not path.is_file():
            raise AgentTargetError(
                f"agent file {path} does not exist (looked from {Path.cwd()}); give the path of the agent's .py "
                "file, or MODULE:NAME for an importable module"
            )
        return path, None, name_given
    if not all(part.isidentifier() for part in location.split(".")):
        raise AgentTargetError(
            f"{target!r} is neither a file nor MODULE:NAME; give e.g. path/to/app.py, path/to/app.py:app or "
            "my_package.app:app"
        )
    return None, location, name_given


def _import(file: Path | None, module: str | None) -> ModuleType:
    if module is not None:
        return importlib.import_module(module)
    assert file is not None
    path = file.resolve()
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        raise AgentTargetError(f"cannot import {file}: not a Python source file")
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = loaded
    spec.loader.exec_module(loaded)
    return loaded


def find_app(module: ModuleType, name: str | None, where: str) -> Any:
    """Return the app ``name`` of ``module``, or its one module-level app when ``name`` is ``None``.

    Raises:
        AgentTargetError: no such attribute, not an app, no app at all, or several without a name.
    """
    from bedrock_agentcore.runtime import BedrockAgentCoreApp

    apps = {key: value for key, value in vars(module).items() if isinstance(value, BedrockAgentCoreApp)}
    if name is not None:
        if not hasattr(module, name):
            found = f"; it has {', '.join(sorted(apps))}" if apps else ""
            raise AgentTargetError(f"{where} has no attribute {name!r}{found}")
        app = getattr(module, name)
        if not isinstance(app, BedrockAgentCoreApp):
            raise AgentTargetError(
                f"{where}:{name} is a {type(app).__name__}, not an AgentCore app (BedrockAgentCoreApp or "
                "AgentCoreRLApp)"
            )
        return app
    unique = {id(app): key for key, app in apps.items()}
    if not unique:
        raise AgentTargetError(
            f"no app in {where}: it defines no AgentCore app at module level; define `app = AgentCoreRLApp()` "
            "(or a BedrockAgentCoreApp) there, not inside a function"
        )
    if len(unique) > 1:
        raise AgentTargetError(
            f"{where} defines several apps ({', '.join(sorted(unique.values()))}); name one: {where}:NAME"
        )
    return next(iter(apps.values()))


def rollout_app(app: Any, where: str) -> Any:
    """Return an app that runs rollouts: ``app`` if it has a rollout entrypoint, else its entrypoint wrapped.

    Raises:
        AgentTargetError: the app has no entrypoint at all.
    """
    if callable(getattr(app, "rollout_entrypoint", None)):
        if "main" not in app.handlers:
            raise AgentTargetError(f"the app in {where} has no handler: decorate one with @app.rollout_entrypoint")
        return app
    handler = app.handlers.get("main")
    if handler is None:
        raise AgentTargetError(f"the app in {where} has no handler: decorate one with @app.entrypoint")
    from agent_app import AgentCoreRLApp

    rollouts = AgentCoreRLApp()
    rollouts.rollout_entrypoint(_storing(handler, takes_context=app._takes_context(handler)))
    return rollouts


def _storing(handler: Callable[..., Any], *, takes_context: bool) -> Callable[..., Any]:
    """``handler`` as a rollout handler of the same kind (sync, async, generator) whose value is a result dict."""

    def args(payload: Any, context: Any) -> tuple[Any, ...]:
        return (payload, context) if takes_context else (payload,)

    if inspect.isasyncgenfunction(handler):

        async def collect(payload: Any, context: Any) -> dict[str, Any]:
            return {RESPONSE_FIELD: [item async for item in handler(*args(payload, context))]}

        return collect
    if inspect.iscoroutinefunction(handler):

        async def wait(payload: Any, context: Any) -> Any:
            return _as_result(await handler(*args(payload, context)))

        return wait

    def call(payload: Any, context: Any) -> Any:
        value = handler(*args(payload, context))
        return _as_result(list(value) if inspect.isgenerator(value) else value)

    return call


def _agent_traceback(exc: BaseException) -> str:
    """The traceback of a failed import, without the launcher's and importlib's own frames."""
    report = traceback.TracebackException.from_exception(exc)
    machinery = (__file__, "<frozen", os.path.dirname(importlib.__file__))
    report.stack = traceback.StackSummary.from_list(
        [frame for frame in report.stack if not frame.filename.startswith(machinery)]
    )
    text = "".join(report.format())
    if isinstance(exc, ModuleNotFoundError) and exc.name and not report.stack:
        text += f"(is {exc.name!r} importable from the current directory {Path.cwd()} or PYTHONPATH?)\n"
    return text


def _as_result(value: Any) -> Any:
    return value if isinstance(value, dict) else {RESPONSE_FIELD: value}


def main(argv: list[str] | None = None) -> int:
    """Import the target, find its app and serve it on ``$PORT``; return an exit code if it cannot."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m local_stack.agent_launcher FILE[:NAME] | MODULE:NAME", file=sys.stderr)
        return EXIT_NO_APP
    target = args[0]
    try:
        file, module_name, name = parse_target(target)
        where = str(file) if file is not None else str(module_name)
        try:
            module = _import(file, module_name)
        except AgentTargetError:
            raise
        except BaseException as exc:
            print(f"agent {target}: importing it failed:\n{_agent_traceback(exc)}", file=sys.stderr)
            return EXIT_IMPORT_FAILED
        app = rollout_app(find_app(module, name, where), where)
    except AgentTargetError as exc:
        print(f"agent {target}: {exc}", file=sys.stderr)
        return EXIT_NO_APP
    from bedrock_agentcore.runtime import BedrockAgentCoreApp

    port = int(os.environ.get("PORT", "8080"))
    BedrockAgentCoreApp.run(app, port=port, host="127.0.0.1")
    return 0


if __name__ == "__main__":
    sys.exit(main())
