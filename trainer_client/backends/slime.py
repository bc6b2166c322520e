"""slime's rollout hooks on our rollouts: ``generate_rollout`` for a whole step, ``generate`` per sample.

- ``--rollout-function-path trainer_client.backends.slime.generate_rollout``: takes
  ``rollout_batch_size`` prompt groups from slime's data source, runs ``n_samples_per_prompt`` rollouts
  per prompt with :meth:`RolloutClient.run_groups` (GRPO group = the prompt, every member kept) and returns
  exactly those groups, every sample filled: a rollout with nothing to train on becomes a padding sample
  (``ABORTED``, ``remove_sample=True``), so each group keeps ``n_samples_per_prompt`` samples.
- ``--custom-generate-function-path trainer_client.backends.slime.generate``: for slime's own rollout loop
  (its dynamic sampling filters and evaluation): one rollout per sample.

Each sample is filled from the gateway's token traces (:mod:`trainer_client.backends.assembly`):
``tokens`` = prompt + response, ``response_length``, ``loss_mask`` (1 sampled, 0 spliced tool/environment
tokens) and ``rollout_log_probs`` of the same length, ``reward``, ``status``. slime normalizes rewards per
group of ``n_samples_per_prompt`` samples, so a rollout gives ONE sample: when its calls break the token
prefix, the last row (the final turn, the earlier turns in its prompt) and ``metadata["agentcore"]["rows"]``
says how many rows there were.

Status: ``COMPLETED``; ``TRUNCATED`` when the last call stopped on length or a side was cut to
``rollout_max_prompt_len`` / ``rollout_max_response_len``; ``FAILED`` with reward 0.0 for a rollout that
did not succeed but has traces (``agentcore_failure_policy: mask`` also sets ``remove_sample``);
``ABORTED`` with ``remove_sample=True`` and one masked pad token when there are no traces.

Group statistics: slime normalises rewards per group of ``n_samples_per_prompt`` (``_post_process_rewards``),
padding samples included, as reward 0 although their loss is masked: a group with one real success and
one padding sample scores the success's advantage as if the other rollout had failed.
``--custom-reward-post-process-path trainer_client.backends.slime.post_process_rewards`` normalises each
group over its samples slime trains on (``remove_sample`` false) and gives removed ones advantage 0;
without it :func:`generate_rollout` warns when a step has padding samples.

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
from trainer_client.backends._shared import (
    RolloutOutcome,
    group_input_id,
    load_function,
    run_rollout,
    shared_client,
)
from trainer_client.backends.assembly import assemble_rows

__all__ = [
    "SlimeSettings",
    "default_payload",
    "fill_sample",
    "generate",
    "generate_rollout",
    "post_process_rewards",
    "rollout_sampling_params",
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


def fill_sample(
    sample: Sample,
    outcome: RolloutOutcome,
    settings: SlimeSettings,
    *,
    max_prompt_length: int | None,
    max_response_length: int | None,
    missing_reward: float | None,
) -> Sample:
    """Fill ``sample`` from one rollout's outcome (see the module docstring) and return it.

    ``missing_reward`` is the reward of a succeeded rollout whose agent returned none (``None`` leaves it
    to slime's reward model).
    """
    rows = assemble_rows(
        outcome.token_traces, max_prompt_length=max_prompt_length, max_response_length=max_response_length
    )
    sample.metadata = {
        **(sample.metadata or {}),
        "agentcore": {
            "session_id": outcome.session_id,
            "status": outcome.status,
            "error": outcome.error,
            "rows": len(rows),
        },
    }
    if not rows:
        return pad_sample(sample, settings.pad_token_id)
    row = rows[-1]
    response = row.response_ids or [settings.pad_token_id]
    sample.tokens = row.prompt_ids + response
    sample.response_length = len(response)
    sample.loss_mask = row.response_mask if row.response_ids else [0]
    sample.rollout_log_probs = None if row.response_logprobs is None else (row.response_logprobs or [0.0])
    if outcome.succeeded:
        reward = outcome.result.reward if outcome.result is not None else None
        sample.reward = missing_reward if reward is None else reward
        truncated = row.truncated or row.finish_reason == "length"
        sample.status = Sample.Status.TRUNCATED if truncated else Sample.Status.COMPLETED
        answer = outcome.result.user_fields.get("response") if outcome.result is not None else None
        sample.response = answer if isinstance(answer, str) else ""
    else:
        sample.reward = 0.0
        sample.status = Sample.Status.FAILED
        sample.remove_sample = settings.failure_policy == "mask"
    return sample


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


async def generate(args: Any, sample: Sample, sampling_params: dict[str, Any]) -> Sample:
    """slime's per-sample hook: run ``sample`` as one rollout in GRPO group ``sample.group_index``.

    The rollout's session id is ``sample.session_id`` when slime set one (its routing key, a uuid4), so
    slime's logs and ours name the same rollout.
    """
    settings = SlimeSettings.from_args(args)
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
    return fill_sample(
        sample,
        outcome,
        settings,
        max_prompt_length=getattr(args, "rollout_max_prompt_len", None),
        max_response_length=getattr(args, "rollout_max_response_len", None),
        missing_reward=None,
    )


def generate_rollout(args: Any, rollout_id: int, data_source: Any, evaluation: bool = False) -> RolloutFnTrainOutput:
    """slime's whole-rollout hook: one training step's ``rollout_batch_size`` groups, every sample filled.

    Raises:
        NotImplementedError: ``evaluation`` (evaluate with slime's own rollout function and :func:`generate`).
    """
    if evaluation:
        raise NotImplementedError(
            "trainer_client.backends.slime.generate_rollout does not evaluate: set --eval-function-path "
            "slime.rollout.sglang_rollout.generate_rollout and --custom-generate-function-path "
            "trainer_client.backends.slime.generate to evaluate through our rollouts"
        )
    settings = SlimeSettings.from_args(args)
    size = int(args.n_samples_per_prompt)
    groups: list[list[Sample]] = data_source.get_samples(int(args.rollout_batch_size))
    by_id = {group_input_id(f"slime-{rollout_id}-{group[0].group_index}"): group for group in groups}
    sampling = {  # what slime's own rollout samples with (sglang_rollout.GenerateState)
        "temperature": args.rollout_temperature,
        "top_p": args.rollout_top_p,
        "top_k": args.rollout_top_k,
        "max_new_tokens": args.rollout_max_response_len,
        "stop": args.rollout_stop,
        "stop_token_ids": args.rollout_stop_token_ids,
    }
    statuses: Counter[str] = Counter()
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
            fill_sample(
                sample,
                outcome,
                settings,
                max_prompt_length=getattr(args, "rollout_max_prompt_len", None),
                max_response_length=getattr(args, "rollout_max_response_len", None),
                missing_reward=0.0,
            )
    logger.info("slime rollout %d: %s", rollout_id, dict(statuses))
    padding = sum(sample.remove_sample for group in groups for sample in group)
    if padding and getattr(args, "custom_reward_post_process_path", None) != POST_PROCESS_PATH:
        logger.warning(
            "slime rollout %d: %d padding samples count as reward 0 in slime's group normalisation; "
            "--custom-reward-post-process-path %s keeps them out",
            rollout_id,
            padding,
            POST_PROCESS_PATH,
        )
    metrics = {f"agentcore/{status}": count for status, count in statuses.items()}
    return RolloutFnTrainOutput(samples=sorted(groups, key=lambda group: group[0].index), metrics=metrics)


def rollout_sampling_params(params: Mapping[str, Any], settings: SlimeSettings) -> dict[str, Any]:
    """What the agent gets as ``_rollout.sampling_params`` from slime's (SGLang's) ``params``: the parameters
    of :data:`_SAMPLING_NAMES` under their ``_rollout`` names, ``None`` values left out, then
    ``settings.sampling_params``."""
    forwarded = {
        _SAMPLING_NAMES[name]: value for name, value in params.items() if name in _SAMPLING_NAMES and value is not None
    }
    return {**forwarded, **settings.sampling_params}


def post_process_rewards(args: Any, samples: Sequence[Sample]) -> tuple[list[float], list[float]]:
    """slime's ``--custom-reward-post-process-path`` hook: its group normalisation without padding samples.

    As slime's default for ``grpo``, ``gspo``, ``cispo`` and ``reinforce_plus_plus_baseline`` (with
    ``rewards_normalization``): each reward minus its group's mean, divided by the group's standard deviation
    (+1e-6) for the first three when ``grpo_std_normalization`` is on; other estimators get the raw rewards.
    The difference: a group (``group_index``) is its samples with ``remove_sample`` false, so padding for
    rollouts that never ran (and ``mask``-policy failures) shift no one's advantage; they get 0.

    Returns:
        ``(raw rewards, normalised rewards)``, one each per sample in ``samples``' order.
    """
    raw = [sample.get_reward_value(args) for sample in samples]
    normalise = args.advantage_estimator in ("grpo", "gspo", "cispo", "reinforce_plus_plus_baseline")
    if not (normalise and args.rewards_normalization):
        return raw, raw
    divide = args.advantage_estimator in ("grpo", "gspo", "cispo") and args.grpo_std_normalization
    kept: defaultdict[object, list[float]] = defaultdict(list)
    for sample, reward in zip(samples, raw, strict=True):
        if not sample.remove_sample:
            kept[sample.group_index].append(float(reward))
    rewards = []
    for sample, reward in zip(samples, raw, strict=True):
        group = kept[sample.group_index]
        if sample.remove_sample:
            rewards.append(0.0)
            continue
        advantage = reward - statistics.fmean(group)
        if divide:
            advantage /= (statistics.stdev(group) if len(group) > 1 else 0.0) + 1e-6
        rewards.append(advantage)
    return raw, rewards
