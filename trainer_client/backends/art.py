"""A ``RolloutSession`` for agentcore-rl-toolkit (ART) 0.2.0's own loops: completion by event through our stack.

ART's verl agent loop, its experimental verl loop and its slime rollout build one session per rollout with
``rollout_session.factory.make_session(session_id, cfg, state)``, where ``cfg["backend"]`` is a class's
dotted path and the other keys are its constructor's. Selecting this class puts our dispatcher (shared
invoke and session budgets), result events (no S3 or HTTP polling) and typed statuses under those loops
unchanged::

    rollout_session_backend:
      backend: trainer_client.backends.art.AgentCoreEventsSession
      experiment: NAME        # our experiment (its descriptor in SSM)
      timeout_s: 1800         # each rollout's server-side deadline (optional)
      region: us-west-2       # optional (default: boto3's)

The agent is an ``agent_app`` (or ART ``AgentCoreRLApp``) ``@rollout_entrypoint``. ``run(task)`` takes
either task shape ART's loops build:

- ``{**payload, "_config": {"base_url", "model_id", "api_key"}}`` (``backends.verl.agent_loop`` and the
  slime rollout): the agent gets ``payload``, and ``_config`` becomes its ``_rollout`` fields;
- the experimental verl loop's row ``{..., "payload", "group_id", "llm": {"base_url", "model", "api_key"}}``:
  the agent gets the row's ``payload`` column, ``group_id`` is the result's ``input_id``, ``llm`` becomes
  ``_rollout`` (``model`` without its ``provider/`` prefix). As ART's own S3 session, a row without a
  ``payload`` dict, a usable ``group_id`` or a complete ``llm`` raises ``RolloutContractError`` (the whole
  run would train nothing); so does a task of neither shape.

No sampling parameters are forwarded: ART's loops apply theirs in their own gateway (a session's
``sampling_defaults``: ``temperature``, ``top_p``, ``top_k``, ``max_new_tokens``), which the agent calls.

The dump: ``task_output`` is the stored result plus a scalar ``reward`` (what ART's loops read),
``reward`` the scalar reward, ``metrics`` the numeric entries of the agent's ``metrics``, ``exception`` the
status and error of any status but ``succeeded``. A ``run`` cancelled by the loop's own timeout cancels its
rollout; a finished rollout's session was already stopped by the finisher.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from agentcore_rl_toolkit.aws_tools.persistent_dict import PersistentDict
from agentcore_rl_toolkit.rollout_session.errors import RolloutContractError
from agentcore_rl_toolkit.rollout_session.lifecycle import RolloutSession
from agentcore_rl_toolkit.rollout_session.wire import RolloutDumpResponse

from rollout_contract import ResultKey, validate_session_id
from trainer_client._config import DEFAULT_ROLLOUT_TIMEOUT_S
from trainer_client._exceptions import DispatchError
from trainer_client._results import ClientResult
from trainer_client.backends._shared import NO_RESULT, group_input_id, run_rollout, shared_client

__all__ = ["AgentCoreEventsSession", "to_dump"]


class AgentCoreEventsSession(RolloutSession):
    """One rollout on our stack, behind ART's ``setup`` / ``run`` / ``shutdown`` (see the module docstring).

    Args:
        session_id: the rollout's session id, chosen by ART's loop (a uuid4); 33-256 key-safe characters.
        session_state: ART's per-rollout record; gets ``exp_id``, ``result_key`` and ``result_s3_bucket``.
        experiment: our experiment's name.
        timeout_s: the rollout's deadline; at it the sweeper ends the rollout as ``timed_out``.
        region: AWS region of the experiment's descriptor (default: boto3's).

    Raises:
        ValueError: a session id ACR or our result keys refuse.
        ExperimentNotFoundError: no such experiment.
    """

    def __init__(
        self,
        session_id: str,
        session_state: PersistentDict,
        *,
        experiment: str,
        timeout_s: float = DEFAULT_ROLLOUT_TIMEOUT_S,
        region: str | None = None,
    ) -> None:
        self.session_id = validate_session_id(session_id)
        self.session_state = session_state
        self.timeout_s = timeout_s
        # One client per process and experiment (ART builds a session per rollout). The token gateway
        # is ART's: base_url comes with each task, never a session of ours.
        self._client = shared_client(experiment, region=region, gateway_url=None)

    async def __aenter__(self) -> AgentCoreEventsSession:
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        await self.shutdown()

    async def setup(self, task: dict[str, Any]) -> None:
        """Nothing to prepare: the dispatcher starts the ACR session within the shared session budget."""

    async def run(self, task: dict[str, Any]) -> RolloutDumpResponse:
        """Run the rollout and return its dump once its result event arrives.

        Cancelling the call (ART's loop timing out) cancels the rollout.

        Raises:
            RolloutContractError: a task of neither of ART's shapes, or a grouped row without ``payload``,
                ``group_id`` or ``llm`` (every rollout of the run would fail).
            DispatchError: the dispatch queue refused the rollout.
            TimeoutError: no result, not even the sweeper's ``timed_out``, long after the deadline.
        """
        payload, group, rollout = _request(task)
        client = self._client
        input_id = group_input_id(group) if group is not None else self.session_id
        await self.session_state.update(
            {
                "exp_id": client.exp_id,
                "result_key": str(ResultKey(client.exp_id, input_id, self.session_id)),
                "result_s3_bucket": client.s3_bucket,
            }
        )
        outcome = await run_rollout(client, payload, input_id, self.timeout_s, session_id=self.session_id, **rollout)
        if outcome.result is not None:
            return to_dump(outcome.result)
        if outcome.status == NO_RESULT:
            raise TimeoutError(f"rollout {self.session_id}: {outcome.error}")
        raise DispatchError(f"rollout {self.session_id} was not submitted: {outcome.error}")

    async def shutdown(self) -> None:
        """Nothing to release: a finished rollout's session was stopped by the finisher, one left early cancelled."""


def to_dump(result: ClientResult) -> RolloutDumpResponse:
    """ART's dump of one terminal result (see the module docstring)."""
    reward = _reward(result) if result.ok else None
    output = {**result, "reward": reward}
    exception = None
    if not result.ok:
        detail = result.error.message if result.error else result.stop_reason
        exception = f"rollout {result.session_id} ended {result.status.value}: {detail}"
        if result.error is not None and result.error.traceback:
            exception = f"{result.error.traceback.rstrip()}\n{exception}"  # ART shows the last line
    metrics = result.user_fields.get("metrics")
    return RolloutDumpResponse(
        metrics=_numeric(metrics) if isinstance(metrics, Mapping) else {},
        task_output=output,
        reward=reward,
        exception=exception,
    )


def _reward(result: ClientResult) -> float | None:
    """``rewards`` (ART's agent convention, last element of a list), else the agent's scalar ``reward`` field."""
    if result.rewards is not None:
        if result.reward is None:
            raise RolloutContractError(f"the agent's rewards cannot be read: {result.field_errors['rewards']}")
        return result.reward
    value = result.user_fields.get("reward")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RolloutContractError(f"the agent returned a reward that is not a finite number: reward={value!r}")
    return float(value)


def _numeric(metrics: Mapping[str, Any]) -> dict[str, float]:
    return {str(k): float(v) for k, v in metrics.items() if isinstance(v, int | float) and not isinstance(v, bool)}


def _request(task: Mapping[str, Any]) -> tuple[dict[str, Any], object | None, dict[str, Any]]:
    """``(payload, group, _rollout fields)`` from either of ART's task shapes (see the module docstring)."""
    if "_config" in task:
        config = task["_config"] or {}
        payload = {name: value for name, value in task.items() if name != "_config"}
        rollout = {name: config.get(name) for name in ("base_url", "model_id", "api_key")}
        return payload, None, _present(rollout)
    if "llm" not in task and "payload" not in task:
        raise RolloutContractError(
            f"the task (keys {sorted(task)}) is neither of ART's shapes: {{**payload, '_config': {{base_url, "
            "model_id, api_key}}} (ART's verl and slime loops) or a row with `payload`, `group_id` and `llm` "
            "(ART's experimental verl loop)"
        )
    row_payload = task.get("payload")
    if not isinstance(row_payload, dict):
        raise RolloutContractError(
            f"the task has no `payload` dict (got {type(row_payload).__name__}): author the dataset rows with a "
            "`payload` column holding the agent's payload, as ART's loop forwards it unchanged"
        )
    group = task.get("group_id")
    if group is None or not str(group).strip():
        raise RolloutContractError(f"the task has no usable `group_id` (got {group!r}): it is the rollout's GRPO group")
    llm = task.get("llm")
    missing = [name for name in ("base_url", "model", "api_key") if not isinstance(llm, Mapping) or not llm.get(name)]
    if missing or not isinstance(llm, Mapping):
        raise RolloutContractError(f"the task's `llm` block lacks {missing} (got {llm!r})")
    rollout = {"base_url": llm["base_url"], "model_id": str(llm["model"]).split("/")[-1], "api_key": llm["api_key"]}
    return row_payload, group, rollout


def _present(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in fields.items() if value is not None}
