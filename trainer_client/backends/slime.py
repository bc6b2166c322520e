"""slime's rollout hooks on our rollouts: ``generate_rollout`` for a whole step, ``generate`` per sample.

- ``--rollout-function-path trainer_client.backends.slime.generate_rollout``: takes
  ``rollout_batch_size`` prompt groups from slime's data source, runs ``n_samples_per_prompt`` rollouts
  per prompt with :meth:`RolloutClient.run_groups` (GRPO group = the prompt, every member kept) and returns
  exactly those groups, each member the list of its rollout's samples: a rollout with nothing to train on
  becomes one padding sample (``ABORTED``, ``remove_sample=True``), so each group keeps
  ``n_samples_per_prompt`` rollouts.
- ``--custom-generate-function-path trainer_client.backends.slime.generate``: for slime's own rollout loop
  (its dynamic sampling filters and evaluation): one rollout per prompt sample, returned as a list of samples
  (slime's loop takes a ``list[Sample]`` from a custom generate function).

A rollout gives ONE ``Sample`` per token row (:mod:`trainer_client.backends.assembly`): calls that extend the
previous prompt + completion token for token share a row, a call that breaks the prefix (an agent that
re-renders its history) starts a new one, so every sampled token reaches the loss. Each row's sample has
``tokens`` = prompt + response, ``response_length``, ``loss_mask`` (1 sampled, 0 spliced tool/environment
tokens) and ``rollout_log_probs`` of the same length (rows cut to ``rollout_max_prompt_len`` /
``rollout_max_response_len`` each); the rows of one rollout share its ``group_index``, its reward, its
failure handling, ``rollout_id`` (slime's key of one rollout: ``rollout_id`` or else ``index`` of the prompt
sample, as slime's own multi-sample rollouts set it) and ``metadata["agentcore"]`` (``session_id``,
``status``, ``error``, ``rows``, and ``row``, the row's index, and ``tokens_by_version``, the row's trained tokens
by the weight version that sampled them).

slime 624b824a trains on rollouts, not samples: ``global_batch_size`` counts rollouts (``rollout_id``s), a
training step holds the whole of each of its rollouts, and the loss averages each rollout's tokens over
``rollout_mask_sums`` (all its rows) before averaging over rollouts, so a rollout of three rows weighs as
much as one of one row (unless ``--calculate-per-token-loss``) and no real sample is trimmed. With static
micro-batches (no ``--use-dynamic-batch-size``) slime requires each step's sample count to fill
``micro_batch_size * data_parallel_size`` (times the micro-batch group under virtual pipelining);
:func:`generate_rollout` adds masked padding rows (``remove_sample=True``, one masked pad token, same
``rollout_id``) to the last rollout of each step to reach it, and :func:`generate` to each rollout.

Status: ``COMPLETED``; ``TRUNCATED`` when the row's last call stopped on length or a side of the row was cut;
``FAILED`` with reward 0.0 for a rollout that did not succeed but has traces (``agentcore_failure_policy:
mask`` also sets ``remove_sample`` on its rows); ``ABORTED`` with ``remove_sample=True`` and one masked pad
token when there are no traces.

Group statistics: GRPO's advantage is one per rollout. slime's default normalisation reshapes the step's
rewards by ``n_samples_per_prompt``, which is wrong as soon as a rollout has several rows, and counts padding
as reward 0. ``--custom-reward-post-process-path trainer_client.backends.slime.post_process_rewards``
normalises each group over its rollouts (``(group_index, session_id)``, samples with ``remove_sample`` false)
and gives that advantage to every row of the rollout (removed samples get 0). Without it
:func:`generate_rollout` refuses a step with more samples than rollouts (and :func:`generate` a rollout of
several rows) before slime trains on it, naming the flag; a step with padding but one sample per rollout only
warns.

Each step's ``RolloutFnTrainOutput.metrics`` (slime logs them with its rollout metrics) has the rollouts per
status and ``agentcore/sampled_tokens`` (completion tokens of every model call), ``agentcore/trained_tokens``
(loss-mask 1 tokens of samples slime trains on) and ``agentcore/rows``; the module logger logs the same.

Weight versions: slime syncs its servers' weights before each rollout step, so :func:`generate_rollout` tells the
gateway the step's ``rollout_id`` as the version they hold (``_workers.report_weight_version``); every trace then
records the version that served its call, each row's ``weight_versions`` lists its calls' versions, and the
step's metrics add ``agentcore/staleness_p50`` / ``agentcore/staleness_max``: ``rollout_id`` minus the version
that sampled each token the step trains (:mod:`trainer_client.staleness`), the median token's and the largest.
Router replay (``--use-rollout-routing-replay``): before the first rollout each hook checks once per process,
with a one-token call through the gateway, that the servers return routing, and refuses to start naming the
server flag when they do not; each row's ``rollout_routed_experts`` is the routing the server returned for its
tokens (``(len(tokens) - 1, layers, top_k)``, every token but the last); a rollout whose calls came back without
routing all the same fails the step.

Inference servers: the agents call the experiment's token gateway, which must send their calls to slime's
SGLang servers. At each hook call (the first one does the work) the router slime starts,
``http://{sglang_router_ip}:{sglang_router_port}/v1``, is registered as the gateway's only worker
(:func:`trainer_client.backends._workers.register_inference_servers`); ``agentcore_register_servers: false``
turns that off, and without a router address (slime's args have none) nothing is registered.

Sampling parameters forwarded as ``_rollout.sampling_params`` (agents pass them to their client with
:func:`agent_app.openai_sampling_kwargs`): slime's ``temperature``, ``top_p``, ``top_k`` (``--rollout-*``),
``max_tokens`` (slime's ``max_new_tokens``, ``--rollout-max-response-len``), ``stop``, ``stop_token_ids``,
and ``min_p``, ``repetition_penalty``, ``presence_penalty``, ``frequency_penalty`` when slime's dict has
them; ``None`` values are left out, and so are slime's detokenization options (``skip_special_tokens``,
``no_stop_trim``, ``spaces_between_special_tokens``: they change only the text the agent reads).
``agentcore_sampling_params`` (YAML) overrides them. ``--rollout-top-p`` below 1 turns on slime's top-p
replay (since slime's PR #2167 every sample must carry the nucleus of each sampled token,
``rollout_top_p_token_ids``), which only SGLang's native ``/generate`` returns: both hooks refuse it
before any rollout runs. To sample with top-p anyway, keep ``--rollout-top-p 1.0`` and set
``agentcore_sampling_params: {top_p: 0.9}``: slime then trains on the full distribution's log probs.

Settings come from slime's ``--custom-config-path`` YAML (see :class:`SlimeSettings`).
"""

from __future__ import annotations

import copy
import logging
import statistics
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import ConfigDict, Field
from slime.rollout.base_types import RolloutFnTrainOutput
from slime.utils.types import Sample

from rollout_contract.settings import Settings
from trainer_client._config import DEFAULT_ROLLOUT_TIMEOUT_S
from trainer_client._grpo import FailurePolicy
from trainer_client.backends import _workers
from trainer_client.backends._shared import (
    RolloutOutcome,
    group_input_id,
    load_function,
    run_rollout,
    shared_client,
)
from trainer_client.backends.assembly import assemble_rows
from trainer_client.routing import RoutingUnavailableError
from trainer_client.staleness import Staleness, trained_tokens_by_version

__all__ = [
    "SlimeSettings",
    "default_payload",
    "generate",
    "generate_rollout",
    "post_process_rewards",
    "rollout_sampling_params",
    "rollout_samples",
]

logger = logging.getLogger("trainer_client.backends.slime")

#: slime's (SGLang's) sampling parameters that decide which tokens are sampled -> their ``_rollout`` names
#: (OpenAI's where OpenAI has the parameter, else the name vLLM and SGLang share).
_SAMPLING_NAMES = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "repetition_penalty": "repetition_penalty",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "max_new_tokens": "max_tokens",
    "stop": "stop",
    "stop_token_ids": "stop_token_ids",
}
#: slime's switch for router replay (R3).
REPLAY_SETTING = "--use-rollout-routing-replay"
#: Our ``--custom-reward-post-process-path`` (see the module docstring).
POST_PROCESS_PATH = f"{__name__}.post_process_rewards"


def default_payload(sample: Sample) -> dict[str, Any]:
    """The agent's payload from a slime prompt sample: ``prompt``, ``label`` and ``metadata``."""
    return {"prompt": sample.prompt, "label": sample.label, "metadata": sample.metadata}


class SlimeSettings(Settings):
    """Our keys in slime's ``--custom-config-path`` YAML (slime sets each as an attribute of ``args``).

    Attributes:
        experiment: ``agentcore_experiment``, our experiment's name (required).
        rollout_timeout_s: ``agentcore_rollout_timeout_s``, each rollout's server-side deadline.
        max_concurrent_sessions: ``agentcore_max_concurrent_sessions``, rollouts in flight per step
            (default: the whole step, ``rollout_batch_size * n_samples_per_prompt``).
        failure_policy: ``agentcore_failure_policy``, ``zero_reward`` or ``mask`` (see the module docstring).
        payload_fn: ``agentcore_payload_fn``, ``module.function`` of a prompt sample (default :func:`default_payload`).
        model_id: ``agentcore_model_id``, the ``_rollout.model_id`` agents ask the model for.
        region: ``agentcore_region``, AWS region of the experiment's descriptor.
        pad_token_id: ``agentcore_pad_token_id``, the token of placeholder samples (always masked).
        sampling_params: ``agentcore_sampling_params``, sampling parameters that override slime's.
        register_servers: ``agentcore_register_servers``, make slime's SGLang router the token gateway's only
            worker at the first hook call (see the module docstring).
    """

    # Built from the YAML's keys, so its errors name them (agentcore_failure_policy must be ...).
    model_config = ConfigDict(alias_generator=lambda name: f"agentcore_{name}", populate_by_name=True)

    experiment: str
    rollout_timeout_s: float = Field(default=DEFAULT_ROLLOUT_TIMEOUT_S, gt=0)
    max_concurrent_sessions: int | None = Field(default=None, ge=1)
    failure_policy: Literal["zero_reward", "mask"] = "zero_reward"
    payload_fn: str | None = None
    model_id: str | None = None
    region: str | None = None
    pad_token_id: int = 0
    sampling_params: Mapping[str, Any] = Field(default_factory=dict)
    register_servers: bool = True

    @classmethod
    def from_args(cls, args: Any) -> SlimeSettings:
        """Read the ``agentcore_*`` attributes of slime's ``args``.

        Raises:
            ValueError: no ``agentcore_experiment``, or an unknown failure policy.
        """
        experiment = getattr(args, "agentcore_experiment", None)
        if not experiment:
            raise ValueError(
                "slime args have no agentcore_experiment: put `agentcore_experiment: NAME` in the YAML file "
                "given to --custom-config-path"
            )
        values = {str(field.alias): getattr(args, str(field.alias), None) for field in cls.model_fields.values()}
        settings = cls(**{key: value for key, value in values.items() if value is not None})
        top_p = getattr(args, "rollout_top_p", 1.0)
        if top_p is not None and top_p != 1.0:
            raise ValueError(
                f"--rollout-top-p {top_p} turns on slime's top-p replay: every sample must carry the top-p "
                "nucleus of each sampled token (rollout_top_p_token_ids), which only SGLang's native /generate "
                "returns, not the OpenAI-compatible endpoint our agents call. Keep --rollout-top-p 1.0 (slime's "
                f"default); to sample with top-p anyway, set `agentcore_sampling_params: {{top_p: {top_p}}}` in "
                "the --custom-config-path YAML (slime then trains on the full distribution's log probs)"
            )
        return settings

    def client(self) -> Any:
        """The process's client of the experiment."""
        return shared_client(self.experiment, region=self.region, model_id=self.model_id)

    def payload(self, sample: Sample) -> Mapping[str, Any]:
        """The agent's payload for a prompt sample."""
        return (
            load_function(self.payload_fn, "agentcore_payload_fn")(sample)
            if self.payload_fn
            else default_payload(sample)
        )


def rollout_samples(
    sample: Sample,
    outcome: RolloutOutcome,
    settings: SlimeSettings,
    *,
    max_prompt_length: int | None,
    max_response_length: int | None,
    missing_reward: float | None,
    routing_replay: bool = False,
) -> list[Sample]:
    """One rollout's samples, one per token row, from its prompt ``sample`` (see the module docstring).

    ``sample`` itself becomes the first; the others are copies of it. ``missing_reward`` is the reward of a
    succeeded rollout whose agent returned none (``None`` leaves it to slime's reward model). Each row's
    ``weight_versions`` are those the gateway recorded for its calls; with ``routing_replay`` (slime's
    ``--use-rollout-routing-replay``) its ``rollout_routed_experts`` are the routing of every token of
    ``tokens`` but the last, ``(len(tokens) - 1, layers, top_k)``, as slime's R3 replay reads them.

    Raises:
        RoutingUnavailableError: ``routing_replay`` and a row's calls came back without routing.
    """
    rows = assemble_rows(
        outcome.token_traces, max_prompt_length=max_prompt_length, max_response_length=max_response_length
    )
    agentcore = {"session_id": outcome.session_id, "status": outcome.status, "error": outcome.error, "rows": len(rows)}
    sample.rollout_id = sample.index if sample.rollout_id is None else sample.rollout_id
    sample.metadata = {**(sample.metadata or {}), "agentcore": {**agentcore, "row": 0}}
    if not rows:
        return [pad_sample(sample, settings.pad_token_id)]
    reward: float | None = 0.0
    answer = ""
    if outcome.succeeded:
        reward = outcome.result.reward if outcome.result is not None else None
        reward = missing_reward if reward is None else reward
        response = outcome.result.user_fields.get("response") if outcome.result is not None else None
        answer = response if isinstance(response, str) else ""
    samples = [sample] + [copy.deepcopy(sample) for _ in rows[1:]]
    traces = outcome.token_traces
    for index, (row_sample, row) in enumerate(zip(samples, rows, strict=True)):
        calls, traces = traces[: row.num_calls], traces[row.num_calls :]
        trained = trained_tokens_by_version([row], calls)
        row_sample.metadata["agentcore"] = {**agentcore, "row": index, "tokens_by_version": _by_str(trained)}
        response_ids = row.response_ids or [settings.pad_token_id]
        row_sample.tokens = row.prompt_ids + response_ids
        row_sample.weight_versions = [str(call.weight_version) for call in calls if call.weight_version is not None]
        if routing_replay:
            if row.routed_experts is None:
                raise RoutingUnavailableError(REPLAY_SETTING, f"the model calls of rollout {outcome.session_id}")
            row_sample.rollout_routed_experts = row.routed_experts.padded(len(row_sample.tokens) - 1)
        row_sample.response_length = len(response_ids)
        row_sample.loss_mask = row.response_mask if row.response_ids else [0]
        row_sample.rollout_log_probs = None if row.response_logprobs is None else (row.response_logprobs or [0.0])
        row_sample.reward = reward
        row_sample.response = answer  # every row: slime's reward model, when it scores, scores the rollout
        if outcome.succeeded:
            truncated = row.truncated or row.finish_reason == "length"
            row_sample.status = Sample.Status.TRUNCATED if truncated else Sample.Status.COMPLETED
        else:
            row_sample.status = Sample.Status.FAILED
            row_sample.remove_sample = settings.failure_policy == "mask"
    return samples


def _by_str(counts: Mapping[int, int]) -> dict[str, int]:
    """Counts by weight version with string keys (slime keeps metadata as JSON)."""
    return {str(version): count for version, count in sorted(counts.items())}


def pad_sample(sample: Sample, pad_token_id: int) -> Sample:
    """Make ``sample`` a placeholder slime keeps in its group but never trains on."""
    sample.tokens = [pad_token_id, pad_token_id]
    sample.response_length = 1
    sample.loss_mask = [0]
    sample.rollout_log_probs = [0.0]
    sample.reward = 0.0
    sample.status = Sample.Status.ABORTED
    sample.remove_sample = True
    return sample


def _padding_row(rollout: Sequence[Sample], pad_token_id: int) -> Sample:
    """A masked sample of ``rollout`` that only fills a micro-batch: a copy of its last sample (same
    ``rollout_id``, group, session, reward and status, so slime's loop treats the rollout alike) with one
    masked pad token, ``remove_sample`` set."""
    row = copy.deepcopy(rollout[-1])
    row.tokens = [pad_token_id, pad_token_id]
    row.response_length = 1
    row.loss_mask = [0]
    row.rollout_log_probs = [0.0]
    row.remove_sample = True
    row.metadata["agentcore"] = {**row.metadata["agentcore"], "row": len(rollout), "padding": True}
    return row


def _samples_multiple(args: Any) -> int:
    """How many samples each training step must be a multiple of, so slime 624b824a's static micro-batching
    (``build_dp_schedule``) gives every data-parallel rank the same number of micro-batches: 1 with
    ``--use-dynamic-batch-size`` (slime splits micro-batches itself), else ``micro_batch_size`` times
    Megatron's ``data_parallel_size`` (times ``microbatch_group_size_per_vp_stage`` under virtual pipelining).
    ``args`` without Megatron's ``data_parallel_size`` (set by its ``validate_args``) count as one rank."""
    if getattr(args, "use_dynamic_batch_size", False):
        return 1
    ranks = getattr(args, "data_parallel_size", None) or 1
    if (getattr(args, "virtual_pipeline_model_parallel_size", None) or 1) > 1:
        ranks *= getattr(args, "microbatch_group_size_per_vp_stage", None) or 1
    return int(ranks) * int(getattr(args, "micro_batch_size", None) or 1)


def _pad_steps(rollouts: Sequence[list[Sample]], rollouts_per_step: int, multiple: int, pad_token_id: int) -> int:
    """Add masked padding rows to the last rollout of each step of ``rollouts_per_step`` rollouts (in slime's
    order) until the step's samples are a multiple of ``multiple``; return how many were added."""
    added = 0
    for start in range(0, len(rollouts), max(1, rollouts_per_step)):
        step = rollouts[start : start + rollouts_per_step]
        for _ in range(-sum(len(rollout) for rollout in step) % multiple):
            step[-1].append(_padding_row(step[-1], pad_token_id))
            added += 1
    return added


def _register_router(args: Any, settings: SlimeSettings) -> None:
    """Make slime's SGLang router the gateway's worker (cheap after the first call in a process)."""
    if not settings.register_servers:
        return
    ip, port = getattr(args, "sglang_router_ip", None), getattr(args, "sglang_router_port", None)
    if ip is None or port is None:
        logger.debug("slime args have no sglang_router_ip/port: no inference server registered with the gateway")
        return
    _workers.register_inference_servers(settings.client(), [f"http://{ip}:{port}/v1"], framework="slime")


def _check_routing(args: Any, settings: SlimeSettings) -> None:
    """With router replay on, check before any rollout that the servers return routing (once per process)."""
    if getattr(args, "use_rollout_routing_replay", False):
        _workers.check_routing_returned(settings.client(), setting=REPLAY_SETTING)


def _refuse_rows_without_our_normalisation(args: Any, samples: int, rollouts: int) -> None:
    if samples > rollouts and getattr(args, "custom_reward_post_process_path", None) != POST_PROCESS_PATH:
        raise ValueError(
            f"{samples} samples for {rollouts} rollouts (multi-turn rollouts give one sample per token row): slime's "
            "default reward normalisation reshapes rewards by n_samples_per_prompt and would give these rows wrong "
            f"advantages. Add --custom-reward-post-process-path {POST_PROCESS_PATH} to slime's command line "
            "(one advantage per rollout, normalised over each group's rollouts)"
        )


async def generate(
    args: Any, sample: Sample, sampling_params: dict[str, Any], evaluation: bool = False
) -> list[Sample]:
    """slime's per-sample hook: run ``sample`` as one rollout in GRPO group ``sample.group_index``; its samples
    (one per token row, plus micro-batch padding rows). When slime evaluates, the last row only, so its
    evaluation counts each rollout's reward once.

    The rollout's session id is ``sample.session_id`` when slime set one (its routing key, a uuid4), so
    slime's logs and ours name the same rollout.

    Raises:
        ValueError: the rollout has several rows and slime's reward post-processing is not ours.
    """
    settings = SlimeSettings.from_args(args)
    _register_router(args, settings)
    _check_routing(args, settings)
    outcome = await run_rollout(
        settings.client(),
        settings.payload(sample),
        f"slime-group-{sample.group_index}",
        settings.rollout_timeout_s,
        session_id=sample.session_id,
        sampling_params=rollout_sampling_params(sampling_params, settings),
    )
    if not outcome.succeeded:
        logger.warning("rollout %s of group %s: %s", outcome.session_id, sample.group_index, outcome.error)
    samples = rollout_samples(
        sample,
        outcome,
        settings,
        max_prompt_length=getattr(args, "rollout_max_prompt_len", None),
        max_response_length=getattr(args, "rollout_max_response_len", None),
        missing_reward=None,
        routing_replay=bool(getattr(args, "use_rollout_routing_replay", False)),
    )
    if evaluation:
        return samples[-1:]
    for _ in range(-len(samples) % _samples_multiple(args)):
        samples.append(_padding_row(samples, settings.pad_token_id))
    _refuse_rows_without_our_normalisation(args, len(samples), 1)
    return samples


def generate_rollout(args: Any, rollout_id: int, data_source: Any, evaluation: bool = False) -> RolloutFnTrainOutput:
    """slime's whole-rollout hook: one training step's ``rollout_batch_size`` groups of rollouts, each rollout
    the list of its samples (one per token row).

    Raises:
        NotImplementedError: ``evaluation`` (evaluate with slime's own rollout function and :func:`generate`).
        ValueError: more samples than rollouts and slime's reward post-processing is not ours.
    """
    if evaluation:
        raise NotImplementedError(
            "trainer_client.backends.slime.generate_rollout does not evaluate: set --eval-function-path "
            "slime.rollout.sglang_rollout.generate_rollout and --custom-generate-function-path "
            "trainer_client.backends.slime.generate to evaluate through our rollouts"
        )
    settings = SlimeSettings.from_args(args)
    _register_router(args, settings)
    _check_routing(args, settings)
    _workers.report_weight_version(settings.client(), rollout_id, framework="slime")
    size = int(args.n_samples_per_prompt)
    groups: list[list[Sample]] = sorted(
        data_source.get_samples(int(args.rollout_batch_size)), key=lambda group: group[0].index
    )
    by_id = {group_input_id(f"slime-{rollout_id}-{group[0].group_index}"): group for group in groups}
    rollouts: dict[int, list[Sample]] = {}  # by the prompt sample's id()
    sampling = {  # what slime's own rollout samples with (sglang_rollout.GenerateState)
        "temperature": args.rollout_temperature,
        "top_p": args.rollout_top_p,
        "top_k": args.rollout_top_k,
        "max_new_tokens": args.rollout_max_response_len,
        "stop": args.rollout_stop,
        "stop_token_ids": args.rollout_stop_token_ids,
    }
    statuses: Counter[str] = Counter()
    sampled = 0
    for rollout_group in settings.client().run_groups(
        [settings.payload(group[0]) for group in by_id.values()],
        samples_per_prompt=size,
        max_concurrent_sessions=settings.max_concurrent_sessions or size * len(groups),
        timeout=settings.rollout_timeout_s,
        policy=FailurePolicy.ZERO_REWARD,
        input_ids=list(by_id),
        sampling_params=rollout_sampling_params(sampling, settings),
    ):
        for sample, item in zip(by_id[rollout_group.input_id], rollout_group.items, strict=True):
            outcome = RolloutOutcome.of_item(item)
            statuses[outcome.status] += 1
            sampled += sum(len(trace.completion_token_ids) for trace in outcome.token_traces)
            rollouts[id(sample)] = rollout_samples(
                sample,
                outcome,
                settings,
                max_prompt_length=getattr(args, "rollout_max_prompt_len", None),
                max_response_length=getattr(args, "rollout_max_response_len", None),
                missing_reward=0.0,
                routing_replay=bool(getattr(args, "use_rollout_routing_replay", False)),
            )
    ordered = [rollouts[id(sample)] for group in groups for sample in group]
    samples = [sample for rollout in ordered for sample in rollout]
    rows = sum(sample.metadata["agentcore"]["rows"] for sample in samples if sample.metadata["agentcore"]["row"] == 0)
    trained = sum(sum(sample.loss_mask) for sample in samples if not sample.remove_sample)
    by_version: Counter[int] = Counter()
    for sample in samples:
        if not sample.remove_sample:
            by_version.update({int(v): n for v, n in sample.metadata["agentcore"].get("tokens_by_version", {}).items()})
    staleness = Staleness.of(rollout_id, by_version)
    padding = sum(sample.remove_sample for rollout in ordered for sample in rollout[:1])
    if padding and getattr(args, "custom_reward_post_process_path", None) != POST_PROCESS_PATH:
        logger.warning(
            "slime rollout %d: %d padding samples count as reward 0 in slime's group normalisation; "
            "--custom-reward-post-process-path %s keeps them out",
            rollout_id,
            padding,
            POST_PROCESS_PATH,
        )
    rollouts_per_step = int(getattr(args, "global_batch_size", None) or len(ordered))
    filled = _pad_steps(ordered, rollouts_per_step, _samples_multiple(args), settings.pad_token_id)
    _refuse_rows_without_our_normalisation(args, len(samples) + filled, len(ordered))
    metrics: dict[str, Any] = {f"agentcore/{status}": count for status, count in statuses.items()}
    metrics |= {"agentcore/sampled_tokens": sampled, "agentcore/trained_tokens": trained, "agentcore/rows": rows}
    if staleness is not None:
        metrics |= {"agentcore/staleness_p50": staleness.p50, "agentcore/staleness_max": staleness.max}
    logger.info(
        "slime rollout %d: %s; %d rows, %d sampled tokens, %d trained (%d micro-batch padding samples)",
        rollout_id,
        dict(statuses),
        rows,
        sampled,
        trained,
        filled,
    )
    nested = [[rollouts[id(sample)] for sample in group] for group in groups]
    return RolloutFnTrainOutput(samples=nested, metrics=metrics)


def rollout_sampling_params(params: Mapping[str, Any], settings: SlimeSettings) -> dict[str, Any]:
    """What the agent gets as ``_rollout.sampling_params`` from slime's (SGLang's) ``params``: the parameters
    of :data:`_SAMPLING_NAMES` under their ``_rollout`` names, ``None`` values left out, then
    ``settings.sampling_params``."""
    forwarded = {
        _SAMPLING_NAMES[name]: value for name, value in params.items() if name in _SAMPLING_NAMES and value is not None
    }
    return {**forwarded, **settings.sampling_params}


def _rollout_key(sample: Sample) -> tuple[object, object]:
    """One rollout of a group: its session (or, for samples not ours, slime's ``rollout_id`` / ``index``)."""
    session = ((sample.metadata or {}).get("agentcore") or {}).get("session_id")
    return sample.group_index, session or (sample.rollout_id if sample.rollout_id is not None else sample.index)


def post_process_rewards(args: Any, samples: Sequence[Sample]) -> tuple[list[float], list[float]]:
    """slime's ``--custom-reward-post-process-path`` hook: its group normalisation, one advantage per rollout.

    As slime's default for ``grpo``, ``gspo``, ``cispo`` and ``reinforce_plus_plus_baseline`` (with
    ``rewards_normalization``): each reward minus its group's mean, divided by the group's standard deviation
    (+1e-6) for the first three when ``grpo_std_normalization`` is on; other estimators get the raw rewards.
    The differences: a group (``group_index``) is its rollouts (``(group_index, session_id)``), each counted
    once with its reward however many rows it has, and every row of a rollout gets the rollout's advantage;
    samples with ``remove_sample`` (padding for rollouts that never ran or for micro-batches, ``mask``-policy
    failures) count in no group and get 0.

    Returns:
        ``(raw rewards, normalised rewards)``, one each per sample in ``samples``' order.
    """
    raw = [sample.get_reward_value(args) for sample in samples]
    normalise = args.advantage_estimator in ("grpo", "gspo", "cispo", "reinforce_plus_plus_baseline")
    if not (normalise and args.rewards_normalization):
        return raw, raw
    divide = args.advantage_estimator in ("grpo", "gspo", "cispo") and args.grpo_std_normalization
    rollout_rewards: dict[tuple[object, object], float] = {}
    for sample, reward in zip(samples, raw, strict=True):
        if not sample.remove_sample:
            rollout_rewards.setdefault(_rollout_key(sample), float(reward))
    groups: defaultdict[object, list[float]] = defaultdict(list)
    for (group_index, _), reward in rollout_rewards.items():
        groups[group_index].append(reward)
    advantages: dict[tuple[object, object], float] = {}
    for key, reward in rollout_rewards.items():
        group = groups[key[0]]
        advantage = reward - statistics.fmean(group)
        if divide:
            advantage /= (statistics.stdev(group) if len(group) > 1 else 0.0) + 1e-6
        advantages[key] = advantage
    return raw, [0.0 if sample.remove_sample else advantages[_rollout_key(sample)] for sample in samples]
