"""Benchmark multi-turn token assembly: CPU time to turn a rollout's gateway traces into training rows.

Each synthetic rollout has ``--turns`` model calls; every call's prompt is the previous prompt plus its
completion (``--completion`` tokens) plus ``--spliced`` tool/environment tokens, after a ``--prompt``-token
first prompt, so each rollout is one row. Measured over ``--rollouts`` rollouts:

- ``assemble_rows`` time per rollout and per thousand response tokens,
- the baseline: the least any assembly must do, concatenating the same response tokens, mask and logprobs
  (``ratio`` = assembly / baseline, both measured in this run).

Run: ``.venv/bin/python benchmarks/assembly_bench.py [--rollouts 200] [--turns 8] [--completion 256]``
"""

from __future__ import annotations

import argparse
import json
import random
import time
from dataclasses import dataclass

import _results as results

from trainer_client.backends.assembly import assemble_rows


@dataclass(frozen=True)
class Call:
    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    logprobs: list[float]
    finish_reason: str = "stop"


def rollout(rng: random.Random, prompt: int, turns: int, completion: int, spliced: int) -> list[Call]:
    """One rollout's calls, each prompt extending the last prompt + completion + spliced tokens."""
    calls, context = [], [rng.randrange(32_000) for _ in range(prompt)]
    for _ in range(turns):
        tokens = [rng.randrange(32_000) for _ in range(completion)]
        calls.append(Call(context, tokens, [-rng.random() for _ in tokens]))
        context = context + tokens + [rng.randrange(32_000) for _ in range(spliced)]
    return calls


def baseline(calls: list[Call], spliced: int) -> int:
    """Concatenate the response tokens, mask and logprobs with no prefix checks."""
    ids: list[int] = []
    mask: list[int] = []
    logprobs: list[float] = []
    for index, call in enumerate(calls):
        if index:
            ids += call.prompt_token_ids[-spliced:] if spliced else []
            mask += [0] * spliced
            logprobs += [0.0] * spliced
        ids += call.completion_token_ids
        mask += [1] * len(call.completion_token_ids)
        logprobs += call.logprobs
    return len(ids)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rollouts", type=int, default=200)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--completion", type=int, default=256)
    parser.add_argument("--spliced", type=int, default=64)
    options = parser.parse_args()
    record = results.begin("assembly_bench")
    rng = random.Random(0)
    rollouts = [
        rollout(rng, options.prompt, options.turns, options.completion, options.spliced)
        for _ in range(options.rollouts)
    ]

    start = time.process_time()
    rows = [assemble_rows(calls) for calls in rollouts]
    assembly_s = time.process_time() - start
    start = time.process_time()
    tokens = sum(baseline(calls, options.spliced) for calls in rollouts)
    baseline_s = time.process_time() - start

    assert all(len(r) == 1 and len(r[0].response_ids) * options.rollouts == tokens for r in rows)
    figures = {
        "rollouts": options.rollouts,
        "turns": options.turns,
        "response_tokens_per_rollout": tokens // options.rollouts,
        "assembly_ms_per_rollout": round(1000 * assembly_s / options.rollouts, 3),
        "assembly_ms_per_1k_tokens": round(1e6 * assembly_s / tokens, 4),
        "baseline_ms_per_rollout": round(1000 * baseline_s / options.rollouts, 3),
        "ratio": round(assembly_s / baseline_s, 2),
    }
    print(json.dumps(figures, indent=2))
    record.write(figures)


if __name__ == "__main__":
    main()
