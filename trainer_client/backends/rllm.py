"""rLLM's remote runtime on the event-driven client: ``rllm.remote_runtime.backend=agentcore_events``.

rLLM's ``RemoteAgentFlowEngine`` makes a session id and a gateway session per rollout, calls
``runtime.execute_tasks([submission])``, then builds the episode from its gateway's traces and the reward
returned here. :class:`AgentCoreEventsRuntime` implements that runtime on :class:`RolloutClient`:

- the rollout runs under rLLM's session id, calling the model at rLLM's ``inference_url``;
- completion comes as an event (no S3 polling), invokes and live sessions are limited by the
  dispatcher's budgets shared by every trainer (``tps_limit`` is accepted and has no effect);
- statuses map to rLLM's ``TerminationReason``: ``succeeded`` -> ``ENV_DONE`` (or the agent's own
  ``termination_reason`` if it names one of rLLM's), ``timed_out`` -> ``TIMEOUT``, the others -> ``ERROR``;
  ``raw_result`` carries ``status_code``, ``stop_reason`` and ``traceback`` where rLLM's engine looks for them.

rLLM chooses its runtime in a plain if/else (``rllm.engine.remote_runtime.create_remote_runtime``), so
:func:`install` adds this backend to that factory, in this process and in every Ray worker started
afterwards (rLLM's verl launcher runs the trainer in a Ray actor).

Config (Hydra)::

    rllm.remote_runtime.enabled=true
    rllm.remote_runtime.backend=agentcore_events
    +rllm.remote_runtime.agentcore.experiment=NAME   # our experiment (default: trainer.experiment_name)
    +rllm.remote_runtime.agentcore.region=REGION     # optional (default: boto3's)
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import importlib
import logging
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

from rllm.engine.remote_runtime.protocol import (
    AgentCoreRuntimeConfig,
    RemoteRuntimeConfig,
    RemoteTaskResult,
    TaskSubmission,
)
from rllm.workflows.workflow import TerminationReason

from rollout_contract import InvalidIdError, Status, validate_experiment
from trainer_client._client import RolloutClient
from trainer_client._results import ClientResult
from trainer_client.backends._shared import NO_RESULT, load_function, run_rollout

__all__ = [
    "BACKEND",
    "AgentCoreEventsRuntime",
    "RuntimeOptions",
    "install",
    "ray_runtime_env",
    "setup_ray_worker",
]

logger = logging.getLogger("trainer_client.backends.rllm")

#: The value of ``rllm.remote_runtime.backend`` that selects this runtime.
BACKEND = "agentcore_events"

#: Ray reads this environment variable at ``ray.init`` and calls the function it names on the runtime env.
RAY_RUNTIME_ENV_HOOK = "RAY_RUNTIME_ENV_HOOK"
_RUNTIME_ENV_HOOK = f"{__name__}.ray_runtime_env"
_WORKER_SETUP_HOOK = f"{__name__}.setup_ray_worker"
#: Hooks that were there before ours; ours calls them too.
_PREVIOUS_RUNTIME_ENV_HOOK = "AGENTCORE_ROLLOUTS_PREVIOUS_RAY_RUNTIME_ENV_HOOK"
_PREVIOUS_WORKER_SETUP_HOOK = "AGENTCORE_ROLLOUTS_PREVIOUS_WORKER_SETUP_HOOK"
_INSTALLED_MARK = "_agentcore_events_installed"


@dataclasses.dataclass(frozen=True)
class RuntimeOptions:
    """Our keys under ``rllm.remote_runtime.agentcore`` (``+rllm.remote_runtime.agentcore.KEY=VALUE``).

    Attributes:
        experiment: our experiment's name (its descriptor in SSM); default rLLM's ``trainer.experiment_name``.
        region: AWS region of the descriptor (default: boto3's).
    """

    experiment: str | None = None
    region: str | None = None

    @classmethod
    def split(cls, agentcore: Mapping[str, Any]) -> tuple[RuntimeOptions, AgentCoreRuntimeConfig]:
        """Take our keys out of the ``agentcore`` mapping; the rest must be rLLM's own.

        Raises:
            ValueError: a key that is neither ours nor rLLM's ``AgentCoreRuntimeConfig`` field.
        """
        ours = {field.name for field in dataclasses.fields(cls)}
        theirs = {field.name for field in dataclasses.fields(AgentCoreRuntimeConfig)}
        unknown = sorted(set(agentcore) - ours - theirs)
        if unknown:
            raise ValueError(
                f"rllm.remote_runtime.agentcore has unknown key(s) {unknown}: the {BACKEND} backend reads "
                f"{sorted(ours)}, rLLM's agentcore config has {sorted(theirs)}"
            )
        options = cls(**{name: value for name, value in agentcore.items() if name in ours})
        return options, AgentCoreRuntimeConfig(**{name: value for name, value in agentcore.items() if name in theirs})


class AgentCoreEventsRuntime:
    """rLLM's ``RemoteAgentRuntime`` protocol on :class:`RolloutClient` (see the module docstring).

    Args:
        config: rLLM's remote runtime config; ``config.agentcore`` holds our :class:`RuntimeOptions` and
            rLLM's ``agent_runtime_arn`` / ``s3_bucket`` (checked against the experiment's when given).
        exp_id: rLLM's ``trainer.experiment_name``, the experiment unless ``agentcore.experiment`` is set.
        model_id: ``_rollout.model_id`` of every rollout.
        client_factory: builds the client (tests); default :meth:`RolloutClient.for_experiment`.

    Raises:
        ValueError: an unknown key under ``agentcore``, or an experiment name our ids do not allow.
    """

    def __init__(
        self,
        config: RemoteRuntimeConfig,
        exp_id: str = "",
        model_id: str = "",
        *,
        client_factory: Callable[..., RolloutClient] = RolloutClient.for_experiment,
    ) -> None:
        self._config = config
        self._options, self._acr = RuntimeOptions.split(config.agentcore)
        name = self._options.experiment or exp_id
        try:
            self.experiment = validate_experiment(name)
        except InvalidIdError as exc:
            raise ValueError(
                f"{exc}; set +rllm.remote_runtime.agentcore.experiment=NAME to the experiment you deployed"
            ) from exc
        self._model_id = model_id or None
        self._client_factory = client_factory
        self._client: RolloutClient | None = None

    def initialize(self) -> None:
        """Connect to the experiment (its descriptor in SSM) and start receiving completion events.

        Raises:
            ExperimentNotFoundError: no such experiment.
            ValueError: ``agent_runtime_arn`` or ``s3_bucket`` given and not the experiment's.
        """
        # The gateway is rLLM's: each rollout's base_url is its inference_url, not a session of ours.
        client = self._client_factory(
            self.experiment, region=self._options.region, gateway_url=None, model_id=self._model_id
        )
        for name, given, actual in (
            ("agent_runtime_arn", self._acr.agent_runtime_arn, client.agent_runtime_arn),
            ("s3_bucket", self._acr.s3_bucket, client.s3_bucket),
        ):
            if given and given != actual:
                client.close()
                raise ValueError(
                    f"rllm.remote_runtime.agentcore.{name}={given!r} but experiment {self.experiment!r} uses "
                    f"{actual!r}; leave it empty or fix it"
                )
        self._client = client
        logger.info("rLLM remote runtime %s on experiment %s", BACKEND, self.experiment)

    async def execute_tasks(
        self, submissions: list[TaskSubmission], timeout: float | None = None
    ) -> list[RemoteTaskResult]:
        """Run every submission as one rollout (``timeout`` is each one's server-side deadline); one result each.

        Cancelling the calling task cancels the rollouts still running.
        """
        if self._client is None:
            raise RuntimeError("call initialize() before execute_tasks()")
        deadline_s = timeout if timeout is not None else self._config.session_timeout
        return list(await asyncio.gather(*(self._run(self._client, sub, deadline_s) for sub in submissions)))

    def shutdown(self) -> None:
        """Stop receiving events; rollouts still pending are not waited for."""
        if self._client is not None:
            self._client.close()
            self._client = None

    async def _run(self, client: RolloutClient, sub: TaskSubmission, deadline_s: float) -> RemoteTaskResult:
        outcome = await run_rollout(
            client, sub.task, sub.task_id, deadline_s, session_id=sub.session_id, base_url=sub.inference_url
        )
        if outcome.result is not None:
            return to_task_result(sub, outcome.result, outcome.elapsed)
        reason = TerminationReason.TIMEOUT if outcome.status == NO_RESULT else TerminationReason.ERROR
        return RemoteTaskResult(
            finished=False,
            session_id=sub.session_id,
            task_id=sub.task_id,
            error=outcome.error,
            termination_reason=reason,
            elapsed=outcome.elapsed,
            metadata={"rollout_status": outcome.status},
        )


def to_task_result(sub: TaskSubmission, result: ClientResult, elapsed: float) -> RemoteTaskResult:
    """rLLM's view of one terminal result (see the module docstring for the mapping)."""
    raw = dict(result)  # the stored document: a failure's traceback is at its top level, where rLLM's engine reads it
    metadata = {"rollout_status": result.status.value, "rollout_result_key": result.result_key}
    if result.ok:
        return RemoteTaskResult(
            finished=True,
            session_id=sub.session_id,
            task_id=sub.task_id,
            reward=result.reward,
            termination_reason=_agent_reason(result) or TerminationReason.ENV_DONE,
            elapsed=elapsed,
            raw_result=raw,
            metadata=metadata,
        )
    reason = TerminationReason.TIMEOUT if result.status is Status.TIMED_OUT else TerminationReason.ERROR
    detail = result.error.message if result.error else result.stop_reason
    return RemoteTaskResult(
        finished=False,
        session_id=sub.session_id,
        task_id=sub.task_id,
        error=f"rollout {sub.session_id} ended {result.status.value}: {detail}",
        termination_reason=reason,
        elapsed=elapsed,
        raw_result=raw,
        metadata=metadata,
    )


def _agent_reason(result: ClientResult) -> TerminationReason | None:
    """The agent's own ``termination_reason`` (e.g. ``max_turns_exceeded``) if it names one of rLLM's."""
    value = result.user_fields.get("termination_reason")
    try:
        return TerminationReason(value) if isinstance(value, str) else None
    except ValueError:
        return None


# Installing the backend into rLLM's factory


def install() -> None:
    """Make ``rllm.remote_runtime.backend=agentcore_events`` work, here and in Ray workers started later.

    Call it once before the trainer is built (before ``AgentTrainer(...).train()``). It wraps rLLM's
    ``create_remote_runtime`` in this process (rLLM's tinker backend) and sets Ray's
    ``RAY_RUNTIME_ENV_HOOK`` so that the next ``ray.init`` (rLLM's verl launcher) runs
    :func:`setup_ray_worker` in every worker. Other backends still go to rLLM's own factory; hooks
    already configured keep running. Idempotent.
    """
    _wrap_factory()
    current = os.environ.get(RAY_RUNTIME_ENV_HOOK)
    if current != _RUNTIME_ENV_HOOK:
        if current:
            os.environ[_PREVIOUS_RUNTIME_ENV_HOOK] = current
        os.environ[RAY_RUNTIME_ENV_HOOK] = _RUNTIME_ENV_HOOK
    ray = sys.modules.get("ray")  # not imported yet: not initialized either
    if ray is not None and ray.is_initialized():
        logger.warning(
            "Ray is already initialized: its workers will not load the %s backend. Call install() before "
            "ray.init, or pass runtime_env={'worker_process_setup_hook': '%s'}",
            BACKEND,
            _WORKER_SETUP_HOOK,
        )


def ray_runtime_env(runtime_env: dict[str, Any] | None) -> dict[str, Any]:
    """Ray's ``RAY_RUNTIME_ENV_HOOK``: return ``runtime_env`` with :func:`setup_ray_worker` as its worker hook.

    Also installs the backend in the calling (driver) process. A worker hook already set (a dotted path)
    is run by :func:`setup_ray_worker` after ours.

    Raises:
        ValueError: the runtime env already has a worker hook given as a callable (give it as a dotted path).
    """
    _wrap_factory()
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
    """Ray's ``worker_process_setup_hook``: install the backend in this worker, then run the previous hook."""
    _wrap_factory()
    previous = os.environ.get(_PREVIOUS_WORKER_SETUP_HOOK)
    if previous:
        load_function(previous, "worker_process_setup_hook")()


def _wrap_factory() -> None:
    module: Any = importlib.import_module("rllm.engine.remote_runtime")
    original = module.create_remote_runtime
    if getattr(original, _INSTALLED_MARK, False):
        return

    @functools.wraps(original)
    def create_remote_runtime(config: RemoteRuntimeConfig, exp_id: str = "", model_id: str = "") -> Any:
        if config.backend == BACKEND:
            return AgentCoreEventsRuntime(config, exp_id=exp_id, model_id=model_id)
        return original(config, exp_id=exp_id, model_id=model_id)

    setattr(create_remote_runtime, _INSTALLED_MARK, True)
    module.create_remote_runtime = create_remote_runtime
