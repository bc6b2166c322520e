"""rLLM's ``RemoteAgentRuntime`` on :class:`RolloutClient` (imports rLLM): see :mod:`trainer_client.backends.rllm`."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ConfigDict
from rllm.engine.remote_runtime.protocol import (
    AgentCoreRuntimeConfig,
    RemoteRuntimeConfig,
    RemoteTaskResult,
    TaskSubmission,
)
from rllm.workflows.workflow import TerminationReason

from rollout_contract import InvalidIdError, Status, validate_experiment
from rollout_contract.settings import Settings
from trainer_client._client import RolloutClient
from trainer_client._results import ClientResult
from trainer_client.backends._shared import NO_RESULT, run_rollout
from trainer_client.backends.rllm import BACKEND

__all__ = ["RLLM_DEFAULT_EXPERIMENT", "AgentCoreEventsRuntime", "RuntimeOptions", "to_task_result"]

logger = logging.getLogger("trainer_client.backends.rllm")

#: rLLM's default ``rllm.trainer.experiment_name`` (rllm/trainer/config/rllm/base.yaml).
RLLM_DEFAULT_EXPERIMENT = "default"


class RuntimeOptions(Settings):
    """Our keys under ``rllm.remote_runtime.agentcore`` (``+rllm.remote_runtime.agentcore.KEY=VALUE``).

    Attributes:
        experiment: our experiment's name (its descriptor in SSM); default rLLM's ``rllm.trainer.experiment_name``
            unless that is rLLM's own default ``'default'``.
        run: a run of the experiment (exp_id ``experiment/run``: results, ``status`` and ``results`` per run).
        region: AWS region of the descriptor (default: boto3's).
    """

    # Hydra reads ``...agentcore.run=1`` as an integer.
    model_config = ConfigDict(coerce_numbers_to_str=True)

    experiment: str | None = None
    run: str | None = None
    region: str | None = None

    @classmethod
    def split(cls, agentcore: Mapping[str, Any]) -> tuple[RuntimeOptions, AgentCoreRuntimeConfig]:
        """Take our keys out of the ``agentcore`` mapping; the rest must be rLLM's own.

        Raises:
            ValueError: a key that is neither ours nor rLLM's ``AgentCoreRuntimeConfig`` field.
        """
        ours = set(cls.model_fields)
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
        exp_id: rLLM's ``rllm.trainer.experiment_name``, the experiment unless ``agentcore.experiment`` is set.
        model_id: ``_rollout.model_id`` of every rollout.
        client_factory: builds the client (tests); default :meth:`RolloutClient.for_experiment`.

    Raises:
        ValueError: an unknown key under ``agentcore``, an experiment name our ids do not allow, or rLLM's
            default experiment name ``'default'`` without ``agentcore.experiment``.
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
        if not self._options.experiment and exp_id in ("", RLLM_DEFAULT_EXPERIMENT):
            raise ValueError(
                f"rllm.trainer.experiment_name is rLLM's default {exp_id!r}, not an experiment of ours: set "
                "+rllm.remote_runtime.agentcore.experiment=NAME to the experiment you deployed"
            )
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
            self.experiment,
            run=self._options.run,
            region=self._options.region,
            gateway_url=None,
            model_id=self._model_id,
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
        logger.info("rLLM remote runtime %s on %s", BACKEND, client.exp_id)

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
