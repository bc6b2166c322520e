"""A verl agent loop that runs each sample as one rollout of our experiment (verl 0.9.1).

verl builds an agent loop object per sample (``hydra.utils.instantiate`` of a registry entry) and calls
``await loop.run(sampling_params, **row)``, where ``row`` is the dataset row (``raw_prompt``, ``uid``,
``reward_model``, ``extra_info``, ...). :class:`AgentCoreAgentLoop` submits the row as one rollout in GRPO
group ``row["uid"]``, awaits its completion event, and returns ``AgentLoopOutput`` built from the
gateway's token traces (:mod:`trainer_client.backends.assembly`): prompt ids, response ids, response mask
(1 sampled, 0 spliced tool/environment tokens), aligned logprobs, the rollout's reward, ``num_turns``.
A rollout whose calls break the token prefix gives one output per row (a list, as verl's V1 trainer,
``trainer.use_v1=true``, accepts); with the legacy trainer only the last row is returned. Every output's
``extra_fields`` carries ``min_global_steps`` / ``max_global_steps`` (the weight versions V1's staleness
metrics and off-policy filters read as ints): the oldest and newest weight version that served the rollout's
model calls, as the gateway recorded them. The loop tells the gateway the version verl's servers hold: a
sample of step ``global_steps`` runs after verl synced that step's weights, so the first sample of a newer step
a worker sees reports it (once per process). A rollout whose traces carry no version falls back to its
dispatching step.

Sampling parameters: verl's dict (``temperature``, ``top_p``, ``top_k``, ``repetition_penalty``,
``logprobs`` from ``actor_rollout_ref.rollout``, ``val_kwargs`` when validating) is forwarded unchanged as
``_rollout.sampling_params``; agents pass it to their client with
:func:`agent_app.openai_sampling_kwargs`.

The agent calls the model through the experiment's token gateway, and the loop gives the gateway verl's own
rollout servers as its workers (:func:`~trainer_client.backends._workers.register_inference_servers`): their
addresses are the server ids of verl's load balancer (``host:port`` of each replica's OpenAI server), read
before each rollout, so the agents sample the current weights and a change of servers is followed
(``register_servers: false`` leaves the gateway's workers alone). One client per experiment per process
(:func:`~trainer_client.backends._shared.shared_client`).

Token accounting: every output's ``extra_fields`` has ``sampled_tokens`` (what the policy sampled in the
rollout) and ``trained_tokens`` (mask-1 response tokens of the outputs returned), which verl keeps in each
sample's ``non_tensor_batch``; a rollout that trains fewer than it sampled is logged with the cause. verl's legacy
trainer (``trainer.use_v1=false``) takes one output per sample, so a rollout whose calls break the token
prefix trains its last row only: the loop says so once at start-up.

Failure policy (``failure_policy``, for rollouts that did not succeed):

- ``zero_reward`` (default): reward 0.0; the tokens the policy sampled stay trainable, so the group's
  advantage pushes them down. A rollout with no traces gives the prompt and one masked token.
- ``mask``: reward 0.0 and every response token masked: it counts in the group's mean, trains nothing.
- ``drop``: no output (V1 only): verl pads the missing trajectory downstream.
- ``raise``: raise :class:`RolloutFailedError`; verl marks the sample's group ``failure`` (evicted with
  ``sync_refill_failed_groups``).

Registration (``agent_loop_config_path``), see the README::

    - name: agentcore
      _target_: trainer_client.backends.verl.AgentCoreAgentLoop
      experiment: my-exp
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput

from trainer_client._config import DEFAULT_ROLLOUT_TIMEOUT_S
from trainer_client._exceptions import RolloutError
from trainer_client.backends._shared import RolloutOutcome, load_function, run_rollout, shared_client
from trainer_client.backends._workers import (
    check_routing_returned,
    register_inference_servers,
    report_weight_version,
)
from trainer_client.backends.assembly import TokenRow, assemble_rows
from trainer_client.routing import RoutingUnavailableError

__all__ = [
    "LEGACY_TRAINER_WARNING",
    "AgentCoreAgentLoop",
    "FailurePolicy",
    "RolloutFailedError",
    "count_tokens",
    "default_payload",
    "to_outputs",
]

logger = logging.getLogger("trainer_client.backends.verl")

#: Said once per process when verl's legacy trainer runs the loop.
LEGACY_TRAINER_WARNING = (
    "verl's legacy trainer (trainer.use_v1=false) takes one output per sample: a rollout whose model calls break "
    "the token prefix (a re-rendered history, a truncated one) trains only its last row, and its earlier turns get "
    "no gradient; set trainer.use_v1=true (verl's default) to train every sampled token"
)
_legacy_warned = False
#: verl's switch for router replay (R3).
REPLAY_SETTING = "actor_rollout_ref.rollout.enable_rollout_routing_replay"

#: Dataset row fields the default payload passes to the agent (``raw_prompt`` becomes ``prompt``).
PAYLOAD_FIELDS = ("data_source", "reward_model", "extra_info", "tools_kwargs", "interaction_kwargs", "index")


class FailurePolicy(StrEnum):
    """What a rollout that did not succeed becomes (see the module docstring)."""

    ZERO_REWARD = "zero_reward"
    MASK = "mask"
    DROP = "drop"
    RAISE = "raise"


class RolloutFailedError(RolloutError):
    """A rollout did not succeed and the failure policy is ``raise``."""


def default_payload(row: Mapping[str, Any]) -> dict[str, Any]:
    """The agent's payload from a verl dataset row: ``prompt`` (the chat messages) and :data:`PAYLOAD_FIELDS`."""
    payload = {"prompt": _jsonable(row["raw_prompt"])}
    payload.update((name, _jsonable(row[name])) for name in PAYLOAD_FIELDS if row.get(name) is not None)
    return payload


class AgentCoreAgentLoop(AgentLoopBase):
    """verl's ``AgentLoopBase`` on our rollouts (see the module docstring).

    Args:
        experiment: our experiment's name (its descriptor in SSM).
        rollout_timeout_s: each rollout's server-side deadline.
        failure_policy: a :class:`FailurePolicy` value.
        payload_fn: ``module.function`` mapping the dataset row to the payload (default :func:`default_payload`).
        model_id: ``_rollout.model_id`` (the name the agent asks the model for).
        region: AWS region of the descriptor (default: boto3's).
        register_servers: give the experiment's token gateway verl's rollout servers as its workers.
        trainer_config, *args, **kwargs: what verl passes to every agent loop (its config, server manager,
            tokenizer, ...).

    Raises:
        ValueError: an unknown failure policy, or ``drop`` with the legacy trainer.
    """

    def __init__(
        self,
        trainer_config: Any,
        *args: Any,
        experiment: str,
        rollout_timeout_s: float = DEFAULT_ROLLOUT_TIMEOUT_S,
        failure_policy: str = FailurePolicy.ZERO_REWARD,
        payload_fn: str | None = None,
        model_id: str | None = None,
        region: str | None = None,
        register_servers: bool = True,
        **kwargs: Any,
    ) -> None:
        global _legacy_warned
        self.failure_policy = FailurePolicy(failure_policy)
        self.multiple_rows = bool(trainer_config.config.trainer.get("use_v1", True))
        if self.failure_policy is FailurePolicy.DROP and not self.multiple_rows:
            raise ValueError(
                "failure_policy 'drop' needs verl's V1 trainer (trainer.use_v1=true), which accepts a sample "
                "without outputs; with the legacy trainer use zero_reward, mask or raise"
            )
        if not self.multiple_rows and not _legacy_warned:
            _legacy_warned = True
            logger.warning(LEGACY_TRAINER_WARNING)
        self.register_servers = register_servers
        super().__init__(trainer_config, *args, **kwargs)
        self.routing_replay = bool(self.rollout_config.get("enable_rollout_routing_replay", False))
        self.client = shared_client(experiment, region=region, model_id=model_id)
        self.rollout_timeout_s = float(rollout_timeout_s)
        self.payload_fn: Callable[[Mapping[str, Any]], Mapping[str, Any]] = (
            load_function(payload_fn, "payload_fn") if payload_fn else default_payload
        )

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput | list[AgentLoopOutput]:
        """Run the row as one rollout in group ``kwargs["uid"]`` and return its outputs."""
        if self.register_servers:
            await self._register_servers()
        if self.routing_replay:
            await asyncio.to_thread(check_routing_returned, self.client, setting=REPLAY_SETTING)
        if "global_steps" in kwargs:
            await asyncio.to_thread(report_weight_version, self.client, int(kwargs["global_steps"]), framework="verl")
        outcome = await run_rollout(
            self.client,
            self.payload_fn(kwargs),
            kwargs["uid"],
            self.rollout_timeout_s,
            sampling_params=_jsonable(sampling_params),
        )
        if not outcome.succeeded:
            logger.warning("rollout %s of group %s: %s", outcome.session_id, kwargs["uid"], outcome.error)
            if self.failure_policy is FailurePolicy.RAISE:
                raise RolloutFailedError(f"rollout of group {kwargs['uid']} failed: {outcome.error}")
        outputs = to_outputs(
            outcome,
            policy=self.failure_policy,
            global_steps=int(kwargs.get("global_steps", 0)),
            prompt_ids=lambda: self._prompt_ids(kwargs["raw_prompt"]),
            pad_token_id=self._pad_token_id(),
            max_prompt_length=self.rollout_config.prompt_length,
            max_response_length=self.rollout_config.response_length,
            routing_replay=self.routing_replay,
        )
        if not self.multiple_rows and len(outputs) > 1:
            outputs[-1].extra_fields["rows_dropped"] = len(outputs) - 1
            outputs = outputs[-1:]
        count_tokens(outputs, outcome)
        return outputs if self.multiple_rows else outputs[0]

    async def _register_servers(self) -> None:
        """Give the gateway the servers verl's load balancer routes to (its server ids are their ``host:port``)."""
        balancer = getattr(self.server_manager, "_load_balancer", None)
        if balancer is None:
            return  # no rollout servers of verl's (a loop built outside verl's worker)
        servers = await balancer.get_all_servers.remote()
        if servers:
            urls = [f"http://{server}/v1" for server in servers]
            await asyncio.to_thread(register_inference_servers, self.client, urls, framework="verl")

    def _prompt_ids(self, messages: Any) -> list[int]:
        ids = self.tokenizer.apply_chat_template(
            list(messages),
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
            **self.apply_chat_template_kwargs,
        )
        return list(ids)[-self.rollout_config.prompt_length :]

    def _pad_token_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return int(pad if pad is not None else self.tokenizer.eos_token_id)


def to_outputs(
    outcome: RolloutOutcome,
    *,
    policy: FailurePolicy,
    global_steps: int,
    prompt_ids: Callable[[], list[int]],
    pad_token_id: int,
    max_prompt_length: int,
    max_response_length: int,
    routing_replay: bool = False,
) -> list[AgentLoopOutput]:
    """verl's outputs for one rollout: one per token row, or a masked placeholder when there are no traces.

    Args:
        outcome: how the rollout ended.
        policy: what a rollout that did not succeed becomes (``raise`` is the caller's).
        global_steps: the trainer step that dispatched the rollout (the weight version of a rollout whose traces
            record none).
        prompt_ids: the row's prompt ids, for the placeholder (called only when there are no traces).
        pad_token_id: the placeholder's one masked response token.
        max_prompt_length: verl's ``rollout.prompt_length``.
        max_response_length: verl's ``rollout.response_length``.
        routing_replay: verl's ``rollout.enable_rollout_routing_replay``: each output carries its row's
            ``routed_experts`` (``(tokens, layers, top_k)``, row ``i`` the routing of token ``i`` of prompt +
            response, which verl pads to the whole sequence).

    Raises:
        RoutingUnavailableError: ``routing_replay`` and a row that made model calls has no routing.
    """
    if not outcome.succeeded and policy is FailurePolicy.DROP:
        return []
    rows = assemble_rows(
        outcome.token_traces, max_prompt_length=max_prompt_length, max_response_length=max_response_length
    )
    masked = not outcome.succeeded and policy is FailurePolicy.MASK
    if not rows:
        rows, masked = [TokenRow(prompt_ids=prompt_ids())], True
    reward = outcome.result.reward if outcome.succeeded and outcome.result is not None else 0.0
    versions = [trace.weight_version for trace in outcome.token_traces if trace.weight_version is not None]
    oldest, newest = (min(versions), max(versions)) if versions else (global_steps, global_steps)
    outputs = []
    traces = outcome.token_traces
    for row in rows:
        if routing_replay and row.num_calls and row.routed_experts is None:
            raise RoutingUnavailableError(REPLAY_SETTING, f"the model calls of rollout {outcome.session_id}")
        calls, traces = traces[: row.num_calls], traces[row.num_calls :]
        response_ids = row.response_ids or [pad_token_id]
        logprobs = row.response_logprobs
        if not row.response_ids:
            logprobs = [0.0] if logprobs is not None else None
        outputs.append(
            AgentLoopOutput(
                prompt_ids=row.prompt_ids,
                response_ids=response_ids,
                response_mask=[0] * len(response_ids) if masked or not row.response_ids else row.response_mask,
                response_logprobs=logprobs,
                reward_score=reward,
                routed_experts=row.routed_experts.numpy() if routing_replay and row.routed_experts else None,
                num_turns=len(calls[-1].messages) + 1 if calls else 0,
                metrics=AgentLoopMetrics(generate_sequences=outcome.elapsed),
                extra_fields={
                    "reward_extra_info": {},
                    "turn_scores": [],
                    "tool_rewards": [],
                    "rollout_session_id": outcome.session_id,
                    "rollout_status": outcome.status,
                    "rollout_error": outcome.error or "",
                    "finish_reason": row.finish_reason or "",
                    "truncated": row.truncated,
                    "min_global_steps": oldest,
                    "max_global_steps": newest,
                },
            )
        )
    return outputs


def count_tokens(outputs: list[AgentLoopOutput], outcome: RolloutOutcome) -> None:
    """Record on every output the rollout's ``sampled_tokens`` and the ``trained_tokens`` of ``outputs``, and log
    a shortfall with its cause."""
    sampled = sum(len(trace.completion_token_ids) for trace in outcome.token_traces)
    trained = sum(sum(output.response_mask) for output in outputs)
    for output in outputs:
        output.extra_fields.update(sampled_tokens=sampled, trained_tokens=trained)
    if trained < sampled:
        causes = []
        if outputs and outputs[-1].extra_fields.get("rows_dropped"):
            causes.append(f"the legacy trainer keeps the last of {outputs[-1].extra_fields['rows_dropped'] + 1} rows")
        if any(output.extra_fields.get("truncated") for output in outputs):
            causes.append("cut to rollout.prompt_length / response_length")
        if not outcome.succeeded:
            causes.append(f"{outcome.status} under the failure policy")
        logger.info(
            "rollout %s trains %d of its %d sampled tokens: %s",
            outcome.session_id,
            trained,
            sampled,
            "; ".join(causes) or "masked",
        )


def _jsonable(value: Any) -> Any:
    """Numpy arrays and scalars (verl's non-tensor batch) as plain JSON values."""
    if isinstance(value, Mapping):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    if hasattr(value, "tolist"):
        return _jsonable(value.tolist())
    return value
