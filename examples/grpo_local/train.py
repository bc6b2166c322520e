"""GRPO on one machine: the tiny transformer policy learns the lookup task through the whole local pipeline.

``make train-demo`` (or ``.venv-ml/bin/python -m examples.grpo_local [--steps N]``) brings the local stack
up with the transformer policy (:mod:`local_stack.tiny_policy`) and the lookup agent
(:mod:`examples.grpo_local.agent`) in the ACR emulator, then per step:

1. ``run_groups``: prompts x samples rollouts through dispatcher, emulator, agent, gateway, S3, SQS; each
   result carries its token traces (one per model call) and group-normalized advantages.
2. Token assembly (:func:`trainer_client.backends.assembly.assemble_rows`): a rollout's calls become one
   row: prompt ids, response ids (sampled tokens mask 1, the spliced tool result mask 0), sampling logprobs.
3. Checks (:mod:`examples.grpo_local.checks`): every trace's ``weight_version`` is this step's; assembled
   ids equal the server's; mask 0 exactly on the spliced tokens; logprobs recomputed under the same
   weights (fp32) match the server's.
4. The clipped GRPO loss with the group advantages, ``--epochs`` optimizer steps on the batch (the
   importance ratio is 1 on the first and moves after; its clipping is the clip fraction), then the new
   weights go to the server (``POST /v1/weights``, version = step + 1).

Writes ``steps.jsonl`` and ``grpo_local.png`` (reward mean and clip fraction per step) to ``--output-dir``;
the last line printed is one JSON object with the run's numbers.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import httpx
from pydantic import Field
from tqdm import tqdm

from examples.grpo_local.checks import BatchChecks, TrainingRow, rows_of_group
from examples.grpo_local.task import episode_payloads
from local_stack._process import environment
from local_stack.hosting import LocalAgent
from local_stack.model_endpoint import EndpointSettings
from local_stack.stack import LocalStack
from local_stack.tiny_policy import PolicyConfig, build_model, require_torch, sequence_logprobs
from rollout_contract.settings import PathValue, Settings
from trainer_client import FailurePolicy, RolloutClient

__all__ = ["TrainSettings", "main", "plot_steps", "train"]

EXPERIMENT = "grpo"
MODEL_NAME = "tiny-policy"
#: The lookup agent, under its own runtime name; its sessions are forked from a process that imported these
#: modules once (the emulator's fork-server mode).
AGENT = LocalAgent(
    name="grpo_lookup",
    command=(sys.executable, str(Path(__file__).with_name("agent.py"))),
    preload=("agent_app.preload", "openai", "examples.grpo_local.task"),
)


class TrainSettings(Settings):
    """The run's knobs (``--help`` lists them with defaults)."""

    steps: int = Field(default=10, ge=1)
    prompts: int = Field(default=6, ge=1)
    samples: int = Field(default=8, ge=1)
    concurrency: int = Field(default=16, ge=1)
    lr: float = Field(default=1e-2, gt=0)
    epochs: int = Field(default=3, ge=1)
    clip: float = Field(default=0.2, gt=0)
    temperature: float = Field(default=1.0, ge=0)
    max_tokens: int = Field(default=8, ge=1)
    seed: int = 0
    timeout_s: float = Field(default=60.0, gt=0)
    run_dir: PathValue = Path(".local-stack") / "grpo-local"
    output_dir: PathValue | None = None


@dataclass
class Run:
    """What the run measured so far."""

    steps: list[dict[str, Any]] = field(default_factory=list)
    checks: BatchChecks = field(default_factory=BatchChecks)


def train(settings: TrainSettings, out: TextIO = sys.stdout) -> dict[str, Any]:
    """Run the GRPO loop end to end; return the summary (also printed as the last line)."""
    torch = require_torch()
    torch.manual_seed(settings.seed)
    started = time.monotonic()
    output_dir = settings.output_dir or Path("results") / f"grpo-local-{datetime.now(UTC):%Y%m%dT%H%M%SZ}"
    output_dir.mkdir(parents=True, exist_ok=True)
    stack_settings = AGENT.settings(
        run_dir=settings.run_dir,
        experiments=(EXPERIMENT,),
        model=EndpointSettings(model_name=MODEL_NAME, seed=settings.seed, policy="transformer"),
        # Room for sessions that finished but are not stopped yet, so new rollouts rarely wait for a slot.
        session_budget=2 * settings.concurrency,
    )
    run = Run()
    out.write(f"starting the local stack with the transformer policy (logs in {settings.run_dir}/) ...\n")
    with LocalStack(stack_settings) as stack, httpx.Client(base_url=str(stack.model_url), timeout=60) as model_http:
        server = model_http.get("/weights").raise_for_status().json()
        model = build_model(PolicyConfig(**server["config"]))
        weights_path = output_dir / "weights.pt"
        _push(torch, model, model_http, weights_path, version=0)
        optimizer = torch.optim.Adam(model.parameters(), lr=settings.lr)
        out.write(
            f"stack up in {time.monotonic() - started:.1f} s; {settings.steps} steps of "
            f"{settings.prompts} prompts x {settings.samples} samples\n"
        )
        sampling = {"temperature": settings.temperature, "top_p": 1.0, "max_tokens": settings.max_tokens}
        with (
            environment(stack.env),
            RolloutClient.for_experiment(EXPERIMENT, model_id=MODEL_NAME, sampling_params=sampling) as client,
            (output_dir / "steps.jsonl").open("w", encoding="utf-8") as log,
            tqdm(range(settings.steps), unit="step", file=out) as bar,
        ):
            for step in bar:
                record = _step(torch, settings, step, client, model, optimizer, run)
                _push(torch, model, model_http, weights_path, version=step + 1)
                record["step_s"] = round(time.monotonic() - record.pop("_started"), 2)
                run.steps.append(record)
                log.write(json.dumps(record) + "\n")
                log.flush()
                bar.set_postfix(
                    reward=f"{record['reward_mean']:.3f}",
                    clip=f"{record['clip_fraction']:.3f}",
                    step_s=record["step_s"],
                )
    plot = plot_steps(
        run.steps,
        output_dir / "grpo_local.png",
        title="GRPO on the local stack: tiny transformer, lookup task",
        lower=("clip_fraction", "clip fraction"),
    )
    summary = _summary(run, time.monotonic() - started, plot, output_dir / "steps.jsonl")
    out.write(json.dumps(summary) + "\n")
    return summary


def _step(
    torch: Any, settings: TrainSettings, step: int, client: RolloutClient, model: Any, optimizer: Any, run: Run
) -> dict[str, Any]:
    """Sample one batch of groups, check it, and update the policy on it."""
    started = time.monotonic()
    payloads = episode_payloads(settings.prompts, seed=settings.seed * 1_000_003 + step)
    groups = list(
        client.run_groups(
            payloads,
            settings.samples,
            settings.concurrency,
            settings.timeout_s,
            policy=FailurePolicy.DROP_FAILED,
            input_ids=[f"step{step}-prompt{index}" for index in range(len(payloads))],
        )
    )
    rollout_s = time.monotonic() - started
    checks = BatchChecks()
    rows: list[TrainingRow] = []
    rewards: list[float] = []
    for group in groups:
        rewards += group.rewards
        rows += rows_of_group(group, step, checks)
    checks.compare_logprobs(rows, lambda ids: _logprobs(torch, model, ids, settings.temperature, grad=False))
    run.checks.merge(checks)
    update = _update(torch, settings, model, optimizer, rows)
    episodes = [item.result for group in groups for item in group.items]
    return {
        "step": step,
        "rollouts": len(episodes),
        "groups": len(groups),
        "reward_mean": statistics.fmean(rewards) if rewards else 0.0,
        "tool_call_rate": _rate(episodes, lambda r: r.user_fields.get("called_tool")),
        "correct_rate": _rate(episodes, lambda r: (r.reward or 0) >= 0.6),
        **update,
        **checks.as_record(),
        "rollout_s": round(rollout_s, 2),
        "_started": started,
    }


def _update(
    torch: Any, settings: TrainSettings, model: Any, optimizer: Any, rows: list[TrainingRow]
) -> dict[str, float]:
    """``settings.epochs`` steps of the clipped GRPO loss (token mean) on ``rows``."""
    trainable = [row for row in rows if row.advantage != 0.0 and any(row.mask)]
    if not trainable:
        return {"loss": 0.0, "clip_fraction": 0.0, "trained_rows": 0}
    ids, mask, old, advantages = _tensors(torch, trainable)
    clipped = total = 0.0
    losses = []
    model.train()
    for _ in range(settings.epochs):
        new = _logprobs(torch, model, ids, settings.temperature, grad=True)
        ratio = torch.exp(new - old)
        objective = torch.minimum(ratio * advantages, ratio.clamp(1 - settings.clip, 1 + settings.clip) * advantages)
        loss = -(objective * mask).sum() / mask.sum()
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        clipped += float((((ratio - 1).abs() > settings.clip).float() * mask).sum())
        total += float(mask.sum())
        losses.append(float(loss.detach()))
    model.eval()
    return {"loss": statistics.fmean(losses), "clip_fraction": clipped / total, "trained_rows": len(trainable)}


def _tensors(torch: Any, rows: list[TrainingRow]) -> tuple[Any, Any, Any, Any]:
    """Padded ids ``[B, L]``; mask, old logprobs ``[B, L - 1]`` aligned with :func:`sequence_logprobs`; advantages."""
    length = max(len(row.ids) for row in rows)
    ids = torch.zeros((len(rows), length), dtype=torch.long)
    mask = torch.zeros((len(rows), length - 1))
    old = torch.zeros((len(rows), length - 1))
    for index, row in enumerate(rows):
        ids[index, : len(row.ids)] = torch.tensor(row.ids)
        start = row.prompt_length - 1  # logprob index of the first response token
        mask[index, start : start + len(row.mask)] = torch.tensor(row.mask, dtype=torch.float)
        old[index, start : start + len(row.mask)] = torch.tensor(row.logprobs)
    advantages = torch.tensor([row.advantage for row in rows]).unsqueeze(1)
    return ids, mask, old, advantages


def _logprobs(torch: Any, model: Any, ids: Any, temperature: float, *, grad: bool) -> Any:
    with torch.set_grad_enabled(grad):
        return sequence_logprobs(model, ids, temperature)


def _push(torch: Any, model: Any, http: httpx.Client, path: Path, *, version: int) -> None:
    """Save the weights and have the server load them as ``version``."""
    torch.save(model.state_dict(), path)
    loaded = http.post("/weights", json={"path": str(path.resolve()), "version": version}).raise_for_status().json()
    if loaded["weight_version"] != version:
        raise RuntimeError(f"the server loaded version {loaded['weight_version']}, expected {version}")


def _rate(results: list[Any], predicate: Any) -> float:
    return statistics.fmean(1.0 if predicate(r) else 0.0 for r in results) if results else 0.0


def plot_steps(steps: list[dict[str, Any]], path: Path, *, title: str, lower: tuple[str, str]) -> Path:
    """Reward mean and ``lower`` (a step field and its axis label, drawn where a step has it) per step, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, (reward_axis, lower_axis) = pyplot.subplots(2, 1, sharex=True, figsize=(7, 5))
    x = [s["step"] for s in steps]
    reward_axis.plot(x, [s["reward_mean"] or 0.0 for s in steps], marker="o")
    reward_axis.set_ylabel("reward mean")
    reward_axis.set_title(title)
    measured = [s for s in steps if s.get(lower[0]) is not None]  # a step that trained nothing measured nothing
    lower_axis.plot([s["step"] for s in measured], [s[lower[0]] for s in measured], marker="o", color="tab:orange")
    lower_axis.set_ylabel(lower[1])
    lower_axis.set_xlabel("step")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    pyplot.close(figure)
    return path


def _summary(run: Run, wall_s: float, plot: Path, log: Path) -> dict[str, Any]:
    rewards = [s["reward_mean"] for s in run.steps]
    last3 = statistics.fmean(rewards[-3:]) if rewards else 0.0
    checks = run.checks
    return {
        "steps": len(run.steps),
        "wall_s": round(wall_s, 1),
        "step_s_mean": round(statistics.fmean(s["step_s"] for s in run.steps), 2) if run.steps else 0.0,
        "rollouts": sum(s["rollouts"] for s in run.steps),
        "reward_first": rewards[0] if rewards else 0.0,
        "reward_last3_mean": last3,
        "reward_doubled": bool(rewards) and last3 >= 2 * rewards[0],
        **checks.as_record(),
        "plot": str(plot),
        "log": str(log),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m examples.grpo_local``: parse the flags, train, exit 1 if a token check failed."""
    defaults = TrainSettings()
    parser = argparse.ArgumentParser(prog="python -m examples.grpo_local", description=__doc__.split("\n\n")[0])
    for name in ("steps", "prompts", "samples", "concurrency", "epochs", "max_tokens", "seed"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(defaults, name))
    for name in ("lr", "clip", "temperature", "timeout_s"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=float, default=getattr(defaults, name))
    parser.add_argument("--run-dir", type=Path, default=defaults.run_dir, help="the local stack's logs")
    parser.add_argument("--output-dir", type=Path, help="default: results/grpo-local-<UTC time>/")
    args = parser.parse_args(argv)
    try:
        settings = TrainSettings(**vars(args))
        require_torch()
    except (ValueError, RuntimeError) as exc:
        parser.error(str(exc))
    summary = train(settings)
    return 0 if summary["token_checks_passed"] else 1
