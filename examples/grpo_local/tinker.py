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
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from examples.grpo_local.checks import LOGPROB_TOLERANCE
from examples.grpo_local.task import episode_payloads
from examples.grpo_local.train import AGENT, EXPERIMENT, MODEL_NAME, plot_steps
from local_stack._process import environment
from local_stack.model_endpoint import EndpointSettings
from local_stack.stack import LocalStack

__all__ = ["main", "run"]

RENDERER = "local_stack.tiny_policy.tinker_renderer:TinyRenderer"


def run(
    *,
    steps: int,
    prompts: int,
    samples: int,
    learning_rate: float,
    max_tokens: int,
    seed: int,
    output_dir: Path,
    run_dir: Path,
    out: Any = sys.stdout,
) -> dict[str, Any]:
    """Train for ``steps`` steps; return the summary (also printed as the last line)."""
    from trainer_client.backends.tinker import TinkerConfig, train

    started = time.monotonic()
    output_dir.mkdir(parents=True, exist_ok=True)
    dataset = output_dir / "dataset.jsonl"
    rows = episode_payloads(steps * prompts, seed=seed)
    dataset.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    stack_settings = AGENT.settings(
        run_dir=run_dir,
        experiments=(EXPERIMENT,),
        model=EndpointSettings(model_name=MODEL_NAME, seed=seed, policy="transformer", tinker=True),
        session_budget=4 * prompts * samples,
    )
    out.write(f"starting the local stack with the Tinker endpoint (logs in {run_dir}/) ...\n")
    with LocalStack(stack_settings) as stack, environment(stack.env):
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
            learning_rate=learning_rate,
            max_new_tokens=max_tokens,
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
    rewards = [step["reward_mean"] or 0.0 for step in history]
    gaps = [step["logprob_max_abs_diff"] for step in history if "logprob_max_abs_diff" in step]
    summary = {
        "steps": len(history),
        "wall_s": round(time.monotonic() - started, 1),
        "reward_first": rewards[0],
        "reward_last3_mean": statistics.fmean(rewards[-3:]),
        "optimizer_steps": history[-1]["optimizer_steps"],
        "trained_tokens": sum(step["trained_tokens"] for step in history),
        "logprob_max_abs_diff": max(gaps, default=0.0),
        "token_exact": bool(gaps) and max(gaps) <= LOGPROB_TOLERANCE,
        "plot": str(plot),
        "log": str(output_dir / "metrics.jsonl"),
    }
    out.write(json.dumps(summary) + "\n")
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m examples.grpo_local.tinker``: train, exit 1 if the trained tokens' logprobs were not exact."""
    parser = argparse.ArgumentParser(prog="python -m examples.grpo_local.tinker", description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--learning-rate", type=float, default=4e-2)
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--run-dir", type=Path, default=Path(".local-stack") / "tinker-local")
    parser.add_argument("--output-dir", type=Path, help="default: results/tinker-local-<UTC time>/")
    args = parser.parse_args(argv)
    output_dir = args.output_dir or Path("results") / f"tinker-local-{datetime.now(UTC):%Y%m%dT%H%M%SZ}"
    summary = run(
        steps=args.steps,
        prompts=args.prompts,
        samples=args.samples,
        learning_rate=args.learning_rate,
        max_tokens=args.max_tokens,
        seed=args.seed,
        output_dir=output_dir,
        run_dir=args.run_dir,
    )
    return 0 if summary["token_exact"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
