"""rLLM's remote runtime on the event-driven client: ``rllm.remote_runtime.backend=agentcore_events``.

rLLM's ``UnifiedTrainer`` (``rllm.trainer.AgentTrainer`` with the ``unified`` config) builds its remote
runtime with ``rllm.engine.remote_runtime.create_remote_runtime(config, exp_id=rllm.trainer.experiment_name,
model_id=model.name)``; its ``RemoteAgentFlowEngine`` makes a session id and a gateway session per rollout,
calls ``runtime.execute_tasks([submission])``, then builds the episode from its gateway's traces and the
reward returned here. :class:`AgentCoreEventsRuntime` implements that runtime on :class:`RolloutClient`:

- the rollout runs under rLLM's session id, calling the model at rLLM's ``inference_url``; the task dict is
  the agent's payload; no sampling parameters are forwarded (rLLM's gateway applies its
  ``rllm.rollout``/rollout-engine sampling parameters to every call of the session);
- completion comes as an event (no S3 polling), invokes and live sessions are limited by the
  dispatcher's budgets shared by every trainer (``tps_limit`` is accepted and has no effect);
- statuses map to rLLM's ``TerminationReason``: ``succeeded`` -> ``ENV_DONE`` (or the agent's own
  ``termination_reason`` if it names one of rLLM's), ``timed_out`` -> ``TIMEOUT``, the others -> ``ERROR``;
  ``raw_result`` carries ``status_code``, ``stop_reason`` and ``traceback`` where rLLM's engine looks for them.

rLLM chooses its runtime in a plain if/else, so :func:`install` adds this backend to that factory, in this
process and in every Ray worker started afterwards (with the verl backend the trainer runs in a Ray actor).
This module imports neither rLLM nor Ray: a worker's setup hook costs the import of ``trainer_client``,
and the factory is wrapped when rLLM's own code imports it (the runtime's module, which imports rLLM, is
loaded when rLLM builds the runtime).

Config (Hydra)::

    rllm.remote_runtime.enabled=true
    rllm.remote_runtime.backend=agentcore_events
    +rllm.remote_runtime.agentcore.experiment=NAME   # our experiment (default: rllm.trainer.experiment_name)
    +rllm.remote_runtime.agentcore.region=REGION     # optional (default: boto3's)
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from trainer_client.backends._shared import load_function

if TYPE_CHECKING:  # loaded on first use (they import rLLM): see __getattr__
    from trainer_client.backends._rllm_runtime import AgentCoreEventsRuntime, RuntimeOptions, to_task_result

__all__ = [
    "BACKEND",
    "AgentCoreEventsRuntime",
    "RLLMNotInstalledError",
    "RuntimeOptions",
    "install",
    "ray_runtime_env",
    "setup_ray_worker",
    "to_task_result",
]

logger = logging.getLogger("trainer_client.backends.rllm")

#: The value of ``rllm.remote_runtime.backend`` that selects this runtime.
BACKEND = "agentcore_events"

#: Ray reads this environment variable at ``ray.init`` and calls the function it names on the runtime env.
RAY_RUNTIME_ENV_HOOK = "RAY_RUNTIME_ENV_HOOK"
#: Under ``uv run`` Ray ignores RAY_RUNTIME_ENV_HOOK and runs its own uv hook instead, unless this is off.
RAY_UV_RUN_SWITCH = "RAY_ENABLE_UV_RUN_RUNTIME_ENV"
_RUNTIME_ENV_HOOK = f"{__name__}.ray_runtime_env"
_WORKER_SETUP_HOOK = f"{__name__}.setup_ray_worker"
#: Hooks that were there before ours; ours calls them too.
_PREVIOUS_RUNTIME_ENV_HOOK = "AGENTCORE_ROLLOUTS_PREVIOUS_RAY_RUNTIME_ENV_HOOK"
_PREVIOUS_WORKER_SETUP_HOOK = "AGENTCORE_ROLLOUTS_PREVIOUS_WORKER_SETUP_HOOK"
_FACTORY_MODULE = "rllm.engine.remote_runtime"
_INSTALLED_MARK = "_agentcore_events_installed"
#: What this module exports from the runtime's module, which imports rLLM.
_RUNTIME_NAMES = ("AgentCoreEventsRuntime", "RuntimeOptions", "to_task_result")


#: How rLLM installs (it is not on PyPI), for the error when it is missing.
RLLM_INSTALL = 'pip install "rllm[verl] @ git+https://github.com/rllm-org/rllm.git"'


class RLLMNotInstalledError(ImportError):
    """:func:`install` found no rLLM with a remote runtime in this environment."""


def __getattr__(name: str) -> Any:
    if name in _RUNTIME_NAMES:
        return getattr(importlib.import_module("trainer_client.backends._rllm_runtime"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def install() -> None:
    """Make ``rllm.remote_runtime.backend=agentcore_events`` work, here and in Ray workers started later.

    Call it once before the trainer is built (before ``AgentTrainer(...).train()``). It adds this backend
    to rLLM's ``create_remote_runtime`` in this process (the tinker backend) and sets Ray's
    ``RAY_RUNTIME_ENV_HOOK`` so that the next ``ray.init`` (the verl backend's launcher) runs
    :func:`setup_ray_worker` in every worker. Other backends still go to rLLM's own factory; hooks already
    configured keep running. Idempotent.

    Under ``uv run`` Ray skips ``RAY_RUNTIME_ENV_HOOK`` for its own uv hook, which would leave the workers
    without this backend: ``install()`` then sets ``RAY_ENABLE_UV_RUN_RUNTIME_ENV=0`` (Ray's switch for
    that) and :func:`ray_runtime_env` applies Ray's uv hook itself, so workers still run in the uv
    environment; it logs a warning saying so.

    Raises:
        RLLMNotInstalledError: this interpreter has no rLLM, or one without ``rllm.engine.remote_runtime``
            (an ``ImportError``; the message says how to install rLLM).
        RuntimeError: under ``uv run`` with Ray already imported and its uv hook on (too late to switch it
            off; the message says what to do).
    """
    _check_rllm_installed()
    _wrap_factory_when_imported()
    current = os.environ.get(RAY_RUNTIME_ENV_HOOK)
    if current != _RUNTIME_ENV_HOOK:
        if current:
            os.environ[_PREVIOUS_RUNTIME_ENV_HOOK] = current
        os.environ[RAY_RUNTIME_ENV_HOOK] = _RUNTIME_ENV_HOOK
    if _uv_run_command() and _ray_uv_hook_enabled():
        _take_over_from_rays_uv_hook()
    ray = sys.modules.get("ray")  # not imported yet: not initialized either
    if ray is not None and ray.is_initialized():
        logger.warning(
            "Ray is already initialized: its workers will not load the %s backend. Call install() before "
            "ray.init, or pass runtime_env={'worker_process_setup_hook': '%s'}",
            BACKEND,
            _WORKER_SETUP_HOOK,
        )


def _check_rllm_installed() -> None:
    """Raise :class:`RLLMNotInstalledError` unless rLLM's factory module can be found (without importing rLLM)."""
    spec = importlib.util.find_spec("rllm")
    locations = list(spec.submodule_search_locations or ()) if spec is not None else []
    if not locations:
        raise RLLMNotInstalledError(
            f"rLLM is not installed in this Python ({sys.executable}), so there is no trainer for the {BACKEND} "
            f"backend to plug into: install it with {RLLM_INSTALL} (rLLM is not on PyPI)"
        )
    factory = os.path.join("engine", "remote_runtime", "__init__.py")
    if not any(os.path.isfile(os.path.join(location, factory)) for location in locations):
        raise RLLMNotInstalledError(
            f"the rLLM at {locations[0]} has no rllm.engine.remote_runtime (its remote runtime, which the {BACKEND} "
            f"backend plugs into, came later): install a current rLLM with {RLLM_INSTALL}"
        )


def ray_runtime_env(runtime_env: dict[str, Any] | None) -> dict[str, Any]:
    """Ray's ``RAY_RUNTIME_ENV_HOOK``: return ``runtime_env`` with :func:`setup_ray_worker` as its worker hook.

    Also installs the backend in the calling (driver) process. Under ``uv run`` Ray's own uv hook is applied
    first (workers run in the uv environment). A worker hook already set (a dotted path) is run by
    :func:`setup_ray_worker` after ours.

    Raises:
        ValueError: the runtime env already has a worker hook given as a callable (give it as a dotted path).
    """
    _wrap_factory_when_imported()
    if _uv_run_command():
        from ray._private.runtime_env.uv_runtime_env_hook import hook as rays_uv_hook

        runtime_env = rays_uv_hook(runtime_env)
    previous = os.environ.get(_PREVIOUS_RUNTIME_ENV_HOOK)
    if previous:
        runtime_env = load_function(previous, RAY_RUNTIME_ENV_HOOK)(runtime_env)
    env = dict(runtime_env or {})
    hook = env.get("worker_process_setup_hook")
    if hook == _WORKER_SETUP_HOOK:
        return env
    if hook is not None:
        if not isinstance(hook, str):
            raise ValueError(
                f"runtime_env's worker_process_setup_hook is a callable ({hook!r}); the {BACKEND} backend "
                "chains only dotted paths: give it as 'package.module.function'"
            )
        env["env_vars"] = {**env.get("env_vars", {}), _PREVIOUS_WORKER_SETUP_HOOK: hook}
    env["worker_process_setup_hook"] = _WORKER_SETUP_HOOK
    return env


def setup_ray_worker() -> None:
    """Ray's ``worker_process_setup_hook``: install the backend in this worker, then run the previous hook.

    Imports neither rLLM nor Ray: rLLM's factory is wrapped when the worker's code imports it.
    """
    _wrap_factory_when_imported()
    previous = os.environ.get(_PREVIOUS_WORKER_SETUP_HOOK)
    if previous:
        load_function(previous, "worker_process_setup_hook")()


def _take_over_from_rays_uv_hook() -> None:
    if "ray" in sys.modules:
        raise RuntimeError(
            "running under `uv run` with Ray already imported: Ray skips RAY_RUNTIME_ENV_HOOK there, so its "
            f"workers would not get the {BACKEND} backend. Call install() before importing ray (or rllm), or "
            f"start with {RAY_UV_RUN_SWITCH}=0 and {RAY_RUNTIME_ENV_HOOK}={_RUNTIME_ENV_HOOK}"
        )
    os.environ[RAY_UV_RUN_SWITCH] = "0"
    logger.warning(
        "running under `uv run`: Ray would skip RAY_RUNTIME_ENV_HOOK for its uv hook, leaving the %s backend "
        "out of its workers; set %s=0, and our hook applies Ray's uv hook itself",
        BACKEND,
        RAY_UV_RUN_SWITCH,
    )


def _ray_uv_hook_enabled() -> bool:
    """Ray's switch as Ray reads it (its constant once Ray is imported, else the environment)."""
    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None:
        return bool(constants.RAY_ENABLE_UV_RUN_RUNTIME_ENV)
    return os.environ.get(RAY_UV_RUN_SWITCH, "1").lower() not in ("0", "false")


def _uv_run_command() -> list[str] | None:
    """The command line of the ``uv run`` process this one runs under (an ancestor), as Ray looks for it."""
    try:
        import psutil
    except ImportError:  # Ray depends on psutil: without it there is no Ray to worry about
        return None
    for parent in psutil.Process().parents():
        try:
            command: list[str] = parent.cmdline()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if len(command) > 1 and os.path.basename(command[0]) == "uv" and command[1] == "run":
            return command
    return None


# Wrapping rLLM's factory


def _wrap_factory_when_imported() -> None:
    """Wrap rLLM's factory now if rLLM's module is loaded, else as soon as something imports it."""
    module = sys.modules.get(_FACTORY_MODULE)
    if module is not None:
        _wrap_factory(module)
    elif not any(isinstance(finder, _WrapOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _WrapOnImport())


class _WrapOnImport(importlib.abc.MetaPathFinder):
    """Finds rLLM's factory module as the other finders do, then wraps its factory once it has run."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != _FACTORY_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _WrappingLoader(spec.loader)
        return spec


class _WrappingLoader(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        _wrap_factory(module)


def _wrap_factory(module: Any) -> None:
    original = module.create_remote_runtime
    if getattr(original, _INSTALLED_MARK, False):
        return

    @functools.wraps(original)
    def create_remote_runtime(config: Any, exp_id: str = "", model_id: str = "") -> Any:
        if config.backend == BACKEND:
            from trainer_client.backends._rllm_runtime import AgentCoreEventsRuntime

            return AgentCoreEventsRuntime(config, exp_id=exp_id, model_id=model_id)
        return original(config, exp_id=exp_id, model_id=model_id)

    setattr(create_remote_runtime, _INSTALLED_MARK, True)
    module.create_remote_runtime = create_remote_runtime
