"""Train on our rollouts through the Tinker API: no GPU cluster, the model's weights stay on the Tinker endpoint.

``python -m trainer_client.backends.tinker config.json`` (or :func:`train`) runs ART's ``tinker_api`` recipe on our
experiment: per step, the weights (first, and after each update) are saved for the sampler and the Tinker sampler
serves them to the agents (:class:`~trainer_client.backends._tinker_sampler.TinkerSampler`, the experiment's token
gateway's only worker, its version reported with ``report_weight_version``); ``batch_size`` prompts x ``group_size``
samples run as GRPO groups (``run_groups``: our dispatcher, budgets and result events); each rollout's gateway
traces become token rows (``assemble_rows``: sampled tokens trained, spliced tool tokens masked), each row one
Tinker ``Datum`` for the ``importance_sampling`` loss with the rollout's centered reward (``r - mean(group)``, no
std) as the advantage of its sampled tokens; one ``forward_backward`` and one ``optim_step`` (Adam, beta 0.9/0.95,
eps 1e-8) per step with a training signal. The logprobs Tinker's forward pass returns for the trained tokens (the
weights that sampled them) are compared with the sampler's: ``logprob_max_abs_diff`` in every step's metrics.

Config (JSON; ART's keys where they mean the same): ``experiment`` (ours: the experiment's descriptor in SSM),
``base_model``, ``endpoint`` (the Tinker base URL; default ``$TINKER_BASE_URL``, else the official service; the key
is ``$TINKER_API_KEY``), ``tokenizer``, ``tokenizer_revision``, ``chat_template_kwargs``, ``renderer`` (ours:
``hf``, or ``module:Class``), ``dataset``, ``output_dir``, ``steps``, ``batch_size``, ``group_size``, ``lora_rank``,
``learning_rate``, ``max_new_tokens``, ``max_context_tokens``, ``rollout_timeout``, ``checkpoint_interval``,
``temperature``, ``max_concurrent_sessions``, ``sampler_host``, ``sampler_port``, ``seed``. ART's keys that our stack
replaces are refused with what replaces them (:data:`REPLACED_KEYS`).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import statistics
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from rollout_contract.settings import PathValue, Settings
from trainer_client._dataset import read_dataset
from trainer_client._grpo import FailurePolicy, RolloutGroup
from trainer_client.backends._shared import load_function
from trainer_client.backends._tinker_sampler import ChatRenderer, HfChatRenderer, TinkerSampler
from trainer_client.backends._workers import register_inference_servers, report_weight_version
from trainer_client.backends.assembly import TokenRow, assemble_rows

__all__ = ["REPLACED_KEYS", "TinkerConfig", "datum_of", "main", "train"]

logger = logging.getLogger("trainer_client.backends")

#: ART ``tinker_api`` keys that our stack replaces, and with what.
REPLACED_KEYS = {
    "agent_runtime_arn": "the experiment's runtime: give `experiment` (its descriptor in SSM names the runtime)",
    "gateway_host": "the experiment's token gateway (`-c gateway_url`); the sampler listens on `sampler_host`",
    "gateway_port": "the experiment's token gateway (`-c gateway_url`); the sampler listens on `sampler_port`",
    "tps_limit": "the dispatcher's shared invoke and session budgets (`rollouts preflight` sizes them)",
    "history_mode": "our token assembly: a call that extends the previous prompt joins its row, else starts one",
    "exp_id": "`experiment` (and the run label it takes, `experiment/run`)",
    "evaluation_dataset": "`rollouts eval EXP --dataset F --model-id <the sampler path>` after training",
    "evaluation_batch_size": "`rollouts eval`",
    "evaluation_temperature": "`rollouts eval --temperature`",
    "evaluation_interval": "`rollouts eval`",
    "wandb_project": "metrics.jsonl in output_dir (no W&B logging here)",
    "wandb_entity": "metrics.jsonl in output_dir (no W&B logging here)",
}
#: The advantage of a sampled token is its rollout's centered reward; these are the Adam settings of ART's recipe.
ADAM = {"beta1": 0.9, "beta2": 0.95, "eps": 1e-8}


class TinkerConfig(Settings):
    """One Tinker training run on an experiment (see the module docstring)."""

    experiment: str
    base_model: str
    dataset: PathValue
    output_dir: PathValue
    endpoint: str | None = None
    tokenizer: str | None = None
    tokenizer_revision: str | None = None
    chat_template_kwargs: dict[str, Any] = Field(default_factory=dict)
    renderer: str = "hf"
    steps: int = Field(default=3, ge=1)
    batch_size: int = Field(default=4, ge=1)
    group_size: int = Field(default=4, ge=2)
    lora_rank: int = Field(default=32, ge=1)
    learning_rate: float = Field(default=1e-5, gt=0)
    max_new_tokens: int = Field(default=2048, ge=1)
    max_context_tokens: int = Field(default=16384, ge=2)
    temperature: float = Field(default=1.0, ge=0)
    rollout_timeout: float = Field(default=180.0, gt=0)
    checkpoint_interval: int = Field(default=20, ge=1)
    max_concurrent_sessions: int | None = Field(default=None, ge=1)
    sampler_host: str = "127.0.0.1"
    sampler_port: int = Field(default=0, ge=0, le=65535)
    seed: int = 42

    @field_validator("learning_rate")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("learning_rate must be finite")
        return value

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> TinkerConfig:
        """Read a config dict, refusing ART's keys that our stack replaces (naming what replaces each)."""
        replaced = sorted(set(values) & set(REPLACED_KEYS))
        if replaced:
            reasons = "; ".join(f"{key}: {REPLACED_KEYS[key]}" for key in replaced)
            raise ValueError(f"remove {', '.join(replaced)} from the config ({reasons})")
        return cls(**values)

    def make_renderer(self) -> ChatRenderer:
        """The renderer ``renderer`` names (``hf``: the tokenizer's chat template)."""
        if self.renderer == "hf":
            return HfChatRenderer(
                self.tokenizer or self.base_model, self.chat_template_kwargs, revision=self.tokenizer_revision
            )
        renderer: ChatRenderer = load_function(self.renderer, "renderer")()
        return renderer


def datum_of(row: TokenRow, advantage: float) -> Any:
    """The ``importance_sampling`` Datum of one token row: inputs shifted once, targets the next tokens, the
    sampler's logprobs and ``advantage`` on sampled tokens (mask 1), 0 on prompt and spliced tokens."""
    import tinker

    if row.response_logprobs is None:
        raise ValueError(
            "a row without logprobs cannot be trained with importance sampling: sample through the gateway"
        )
    ids = row.prompt_ids + row.response_ids
    prefix = len(row.prompt_ids) - 1
    logprobs = [0.0] * prefix + [
        lp if mask else 0.0 for mask, lp in zip(row.response_mask, row.response_logprobs, strict=True)
    ]
    advantages = [0.0] * prefix + [advantage * mask for mask in row.response_mask]

    def tensor(data: list[Any], dtype: str) -> Any:
        return tinker.TensorData(data=data, dtype=dtype, shape=[len(data)])

    return tinker.Datum(
        model_input=tinker.ModelInput.from_ints(ids[:-1]),
        loss_fn_inputs={
            "target_tokens": tensor(ids[1:], "int64"),
            "logprobs": tensor(logprobs, "float32"),
            "advantages": tensor(advantages, "float32"),
        },
    )


def _group_rows(group: RolloutGroup) -> tuple[list[tuple[TokenRow, float]], list[float]]:
    """Rows of a group's members that have sampled tokens, each with its centered reward; the rewards scored.

    As ART's recipe: a failed rollout with tokens scores 0, one without tokens is left out of the mean.
    """
    scored = []
    for item, reward in zip(group.items, group.rewards, strict=True):
        rows = [
            row
            for row in assemble_rows((item.result.token_traces if item.result else None) or [])
            if any(row.response_mask)
        ]
        if rows:
            scored.append((rows, reward))
    if len(scored) < 2:
        return [], [reward for _, reward in scored]
    mean = statistics.fmean(reward for _, reward in scored)
    return [(row, reward - mean) for rows, reward in scored for row in rows], [reward for _, reward in scored]


def train(config: TinkerConfig) -> list[dict[str, Any]]:
    """Run the loop (see the module docstring); return each step's metrics (also in ``output_dir/metrics.jsonl``)."""
    import tinker

    from trainer_client import RolloutClient

    payloads = read_dataset(config.dataset)
    if len(payloads) < config.batch_size:
        raise ValueError(f"the dataset has {len(payloads)} rows; a step takes batch_size = {config.batch_size}")
    config.output_dir.mkdir(parents=True, exist_ok=True)
    (config.output_dir / "config.json").write_text(config.model_dump_json(indent=2) + "\n", encoding="utf-8")
    sampling_params = {"temperature": config.temperature, "top_p": 1.0, "max_tokens": config.max_new_tokens}
    concurrency = config.max_concurrent_sessions or config.batch_size * config.group_size
    history: list[dict[str, Any]] = []
    updates = 0
    with (
        # Closed at the end: its connections and its event loop's transports go with it.
        tinker.ServiceClient(
            base_url=config.endpoint, api_key=os.environ.get("TINKER_API_KEY") or "tml-dummy"
        ) as service,
        TinkerSampler(
            config.make_renderer(),
            model_name=config.base_model,
            max_tokens=config.max_new_tokens,
            max_context=config.max_context_tokens,
            host=config.sampler_host,
            port=config.sampler_port,
        ) as sampler,
        RolloutClient.for_experiment(
            config.experiment, model_id=config.base_model, sampling_params=sampling_params
        ) as client,
        (config.output_dir / "metrics.jsonl").open("a", encoding="utf-8") as log,
    ):
        training = service.create_lora_training_client(
            base_model=config.base_model, rank=config.lora_rank, seed=config.seed
        ).result()
        register_inference_servers(client, [sampler.url], framework="tinker")
        for step in range(config.steps):
            started = time.monotonic()
            if sampler.weight_version != updates or step == 0:  # the weights moved (or none served yet): sync
                sampler.use(training.save_weights_and_get_sampling_client().result(), updates)
                report_weight_version(client, updates, framework="tinker")
            start = step * config.batch_size % len(payloads)
            batch = [payloads[(start + index) % len(payloads)] for index in range(config.batch_size)]
            groups = list(
                client.run_groups(
                    batch,
                    config.group_size,
                    concurrency,
                    config.rollout_timeout,
                    policy=FailurePolicy.ZERO_REWARD,
                    input_ids=[f"tinker-step{step}-prompt{index}" for index in range(len(batch))],
                )
            )
            metrics = _update(training, groups, config, version=updates)
            updates += metrics["trained"]
            metrics.update(step=step + 1, optimizer_steps=updates, weight_version=sampler.weight_version)
            metrics["step_s"] = round(time.monotonic() - started, 2)
            if (step + 1) % config.checkpoint_interval == 0 or step + 1 == config.steps:
                metrics["checkpoint"] = training.save_state(f"step-{step + 1:04d}").result().path
            log.write(json.dumps(metrics) + "\n")
            log.flush()
            logger.info("tinker step %d: %s", step + 1, json.dumps(metrics))
            history.append(metrics)
    return history


def _update(training: Any, groups: Sequence[RolloutGroup], config: TinkerConfig, *, version: int) -> dict[str, Any]:
    """Build the step's datums and, if any group has a signal, take one forward-backward and optimizer step.

    ``version`` is the weights the sampler served this step: a trace served by any other is off-policy."""
    import tinker

    rows: list[tuple[TokenRow, float]] = []
    rewards: list[float] = []
    for group in groups:
        group_rows, group_rewards = _group_rows(group)
        rewards += group_rewards
        rows += [(row, advantage) for row, advantage in group_rows if advantage != 0.0]
    traces = [
        trace for group in groups for item in group.items if item.result for trace in item.result.token_traces or []
    ]
    metrics: dict[str, Any] = {
        "reward_mean": statistics.fmean(rewards) if rewards else None,
        "traces": len(traces),
        "off_policy_traces": sum(trace.weight_version != version for trace in traces),
        "rollouts": sum(len(group.items) for group in groups),
        "failed": sum(len(group.failed) for group in groups),
        "datums": len(rows),
        "trained_tokens": sum(sum(row.response_mask) for row, _ in rows),
        "trained": 0,
    }
    if not rows:
        return metrics
    datums = [datum_of(row, advantage) for row, advantage in rows]
    backward = training.forward_backward(datums, loss_fn="importance_sampling")
    optimizer = training.optim_step(tinker.AdamParams(learning_rate=config.learning_rate, **ADAM))
    result = backward.result()
    optimizer.result()
    metrics["trained"] = 1
    metrics["loss"] = result.metrics.get("loss:sum")
    metrics["logprob_max_abs_diff"] = _logprob_gap(rows, result.loss_fn_outputs)
    return metrics


def _logprob_gap(rows: Sequence[tuple[TokenRow, float]], outputs: Sequence[Mapping[str, Any]]) -> float:
    """The largest |trainer logprob - sampler logprob| over the trained (mask 1) tokens."""
    gap = 0.0
    for (row, _), output in zip(rows, outputs, strict=True):
        trainer = output["logprobs"].tolist()[len(row.prompt_ids) - 1 :]
        for mask, sampled, recomputed in zip(row.response_mask, row.response_logprobs or [], trainer, strict=False):
            if mask:
                gap = max(gap, abs(sampled - recomputed))
    return gap


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m trainer_client.backends.tinker CONFIG.json``."""
    parser = argparse.ArgumentParser(
        prog="python -m trainer_client.backends.tinker", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "config", type=Path, help="the run's JSON config (ART's tinker_api keys where they mean the same)"
    )
    parser.add_argument("--log-level", choices=("DEBUG", "INFO", "WARNING", "ERROR"), default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = TinkerConfig.from_mapping(json.loads(args.config.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        parser.error(f"{args.config}: {exc}")
    train(config)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
