"""The closed loop through the Tinker API: the lookup task, trained by our Tinker adapter on the local stack.

``.venv-ml/bin/python -m examples.grpo_local.tinker [--steps N]`` brings the local stack up with the tiny policy
behind the Tinker API (``rollouts local up --tinker``'s endpoint) and the lookup agent, then runs
:func:`trainer_client.backends.tinker.train` on it: the agents' calls go through the token gateway to the
adapter's Tinker sampler, each step is one ``forward_backward`` (importance sampling) and one ``optim_step`` on the
endpoint, and the sampler is synced after each. Writes ``metrics.jsonl`` and ``tinker_local.png`` (reward mean
and the trainer-sampler logprob gap per step) to ``--output-dir``; the last line printed is one JSON summary.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from examples.grpo_local.checks import LOGPROB_TOLERANCE
from examples.grpo_local.task import episode_payloads
from examples.grpo_local.train import AGENT, EXPERIMENT, MODEL_NAME, plot_steps
from local_stack._process import environment
from local_stack.model_endpoint import EndpointSettings
from local_stack.stack import LocalStack, StackSettings

__all__ = ["LoopSettings", "loop_main", "loop_summary", "main", "run"]

RENDERER = "local_stack.tiny_policy.tinker_renderer:TinyRenderer"


@dataclass(frozen=True)
class LoopSettings:
    """One closed-loop run of the lookup task through the local Tinker endpoint (the defaults: the README's)."""

    output_dir: Path
    run_dir: Path
    steps: int = 10
    prompts: int = 6
    samples: int = 8
    learning_rate: float = 4e-2
    max_tokens: int = 8
    seed: int = 0

    def stack_settings(self, model_name: str, **fields: Any) -> StackSettings:
        """The run's local stack: the lookup agent, and the tiny policy behind the Tinker API served as
        ``model_name`` (``fields``: more :class:`StackSettings`)."""
        return AGENT.settings(
            run_dir=self.run_dir,
            experiments=(EXPERIMENT,),
            model=EndpointSettings(model_name=model_name, seed=self.seed, policy="transformer", tinker=True),
            session_budget=4 * self.prompts * self.samples,
            **fields,
        )


def run(settings: LoopSettings, out: Any = sys.stdout) -> dict[str, Any]:
    """Train for ``settings.steps`` steps; return the summary (also printed as the last line)."""
    from trainer_client.backends.tinker import TinkerConfig, train

    started = time.monotonic()
    steps, prompts, samples, seed = settings.steps, settings.prompts, settings.samples, settings.seed
    output_dir, run_dir = settings.output_dir, settings.run_dir
    output_dir.mkdir(parents=True, exist_ok=True)
    dataset = output_dir / "dataset.jsonl"
    rows = episode_payloads(steps * prompts, seed=seed)
    dataset.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    out.write(f"starting the local stack with the Tinker endpoint (logs in {run_dir}/) ...\n")
    with LocalStack(settings.stack_settings(MODEL_NAME)) as stack, environment(stack.env):
        config = TinkerConfig(
            experiment=EXPERIMENT,
            base_model=MODEL_NAME,
            endpoint=str(stack.model_url).removesuffix("/v1"),
            renderer=RENDERER,
            dataset=dataset,
            output_dir=output_dir,
            steps=steps,
            batch_size=prompts,
            group_size=samples,
            learning_rate=settings.learning_rate,
            max_new_tokens=settings.max_tokens,
            rollout_timeout=60.0,
            seed=seed,
        )
        history = train(config)
    plot = plot_steps(
        history,
        output_dir / "tinker_local.png",
        title="Tinker API on the local stack: tiny transformer, lookup task",
        lower=("logprob_max_abs_diff", "max |trainer - sampler logprob|"),
    )
    summary = {
        **loop_summary(history, started=started, plot=plot, log=output_dir / "metrics.jsonl"),
        "optimizer_steps": history[-1]["optimizer_steps"],
        "trained_tokens": sum(step["trained_tokens"] for step in history),
    }
    out.write(json.dumps(summary) + "\n")
    return summary


def loop_summary(history: Sequence[dict[str, Any]], *, started: float, plot: Path, log: Path) -> dict[str, Any]:
    """The summary of a run's steps (``reward_mean`` and, where trained, ``logprob_max_abs_diff`` each)."""
    rewards = [step["reward_mean"] or 0.0 for step in history]
    gaps = [step["logprob_max_abs_diff"] for step in history if step.get("logprob_max_abs_diff") is not None]
    return {
        "steps": len(history),
        "wall_s": round(time.monotonic() - started, 1),
        "reward_first": rewards[0],
        "reward_last3_mean": statistics.fmean(rewards[-3:]),
        "logprob_max_abs_diff": max(gaps, default=0.0),
        "token_exact": bool(gaps) and max(gaps) <= LOGPROB_TOLERANCE,
        "plot": str(plot),
        "log": str(log),
    }


def loop_main(
    argv: Sequence[str] | None, *, prog: str, description: str, name: str, train: Callable[[LoopSettings], Any]
) -> int:
    """Parse a closed loop's options into :class:`LoopSettings`, ``train`` with them; 1 unless token-exact."""
    defaults = LoopSettings(output_dir=Path(), run_dir=Path())
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--steps", type=int, default=defaults.steps)
    parser.add_argument("--prompts", type=int, default=defaults.prompts)
    parser.add_argument("--samples", type=int, default=defaults.samples)
    parser.add_argument("--learning-rate", type=float, default=defaults.learning_rate)
    parser.add_argument("--max-tokens", type=int, default=defaults.max_tokens)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--run-dir", type=Path, default=Path(".local-stack") / name)
    parser.add_argument("--output-dir", type=Path, help=f"default: results/{name}-<UTC time>/")
    args = vars(parser.parse_args(argv))
    output_dir = args.pop("output_dir") or Path("results") / f"{name}-{datetime.now(UTC):%Y%m%dT%H%M%SZ}"
    summary = train(LoopSettings(output_dir=output_dir.resolve(), **args))
    return 0 if summary["token_exact"] else 1


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m examples.grpo_local.tinker``: train, exit 1 if the trained tokens' logprobs were not exact."""
    prog, description = "python -m examples.grpo_local.tinker", __doc__.split("\n\n")[0]
    return loop_main(argv, prog=prog, description=description, name="tinker-local", train=run)


if __name__ == "__main__":
    raise SystemExit(main())
