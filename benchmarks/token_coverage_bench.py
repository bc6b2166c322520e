"""How many of the tokens the policy sampled each framework adapter trains on: trained / sampled, per framework.

For each example agent (the math agent on the demo's problems, the coding agent on its tasks with the stand-in's
scripted answers) a fresh local stack runs ``--prompts`` prompts x ``--samples`` samples in GRPO groups through the
whole path (dispatcher, emulator, agent, gateway), and the gateway's token traces of every rollout are handed to
each adapter's own conversion, at the framework's default lengths:

- ``verl`` (V1 trainer, verl's default): :func:`trainer_client.backends.verl.to_outputs`, every token row, cut
  to ``rollout.prompt_length`` / ``response_length`` of verl's composed ``ppo_trainer`` config (512 / 512);
- ``verl-legacy`` (``trainer.use_v1=false``): the same outputs, the last one kept (what the legacy trainer takes);
- ``slime``: :func:`trainer_client.backends.slime.rollout_samples`, one sample per token row, at slime's default
  ``rollout_max_prompt_len`` / ``rollout_max_response_len`` (none), counting samples slime trains on.

sampled = completion tokens in the traces; trained = response tokens with loss mask 1 in what the framework gets.
Every shortfall is printed with its cause (rows dropped, cut to a length, failures masked). rLLM and ART's loops
are not here: they build their samples from their own gateways' traces, not through these adapters.

Run with the ML venv (verl's types; slime's from the stand-ins):
``.venv-ml/bin/python benchmarks/token_coverage_bench.py [--prompts 8] [--samples 4]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import warnings
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "benchmarks"), str(REPO / "tests" / "stand_ins" / "slime")]

with warnings.catch_warnings():  # verl and Ray warn at import about their own dependencies
    warnings.simplefilter("ignore")
    from slime.utils.types import Sample
    from verl.experimental.agent_loop.agent_loop import AgentLoopOutput

    from trainer_client.backends import verl as backend_verl

import _results as results  # noqa: E402

from examples.math_agent.local import MATH_DEMO  # noqa: E402
from local_stack._process import environment  # noqa: E402
from local_stack.agent_target import target_agent  # noqa: E402
from local_stack.demo import dataset_task  # noqa: E402
from local_stack.hosting import DemoTask  # noqa: E402
from local_stack.model_endpoint.app import EndpointSettings  # noqa: E402
from local_stack.stack import LocalStack  # noqa: E402
from trainer_client import FailurePolicy, PollSettings, RolloutClient  # noqa: E402
from trainer_client.backends import slime as backend_slime  # noqa: E402
from trainer_client.backends._shared import RolloutOutcome  # noqa: E402

EXP = "coverage"
CODING = REPO / "examples" / "coding_agent"
#: verl 0.9.1's ppo_trainer defaults (actor_rollout_ref.rollout.prompt_length / response_length).
VERL_PROMPT_LENGTH = VERL_RESPONSE_LENGTH = 512


@dataclass
class Coverage:
    """Sampled and trained tokens of one framework on one agent, and the sampled tokens not trained, by cause."""

    rollouts: int = 0
    sampled: int = 0
    trained: int = 0
    shortfall: Counter[str] = field(default_factory=Counter)

    def add(self, sampled: int, lost: Mapping[str, int]) -> None:
        """One rollout: ``sampled`` tokens, of which ``lost[cause]`` were not trained for each cause."""
        self.rollouts += 1
        self.sampled += sampled
        self.trained += sampled - sum(lost.values())
        self.shortfall.update({cause: tokens for cause, tokens in lost.items() if tokens})

    def figures(self) -> dict[str, Any]:
        ratio = self.trained / self.sampled if self.sampled else None
        return {
            "rollouts": self.rollouts,
            "sampled_tokens": self.sampled,
            "trained_tokens": self.trained,
            "trained_over_sampled": None if ratio is None else round(ratio, 4),
            "shortfall_by_cause": dict(self.shortfall),
        }


def trained(rows: Sequence[AgentLoopOutput] | Sequence[Sample]) -> int:
    """Response tokens with loss mask 1."""
    return sum(sum(row.response_mask if isinstance(row, AgentLoopOutput) else row.loss_mask) for row in rows)


def verl_lost(outcome: RolloutOutcome, sampled: int, *, legacy: bool) -> dict[str, int]:
    """Sampled tokens of one rollout that verl's outputs do not train, by cause."""
    outputs: list[AgentLoopOutput] = backend_verl.to_outputs(
        outcome,
        policy=backend_verl.FailurePolicy.ZERO_REWARD,
        global_steps=1,
        prompt_ids=lambda: [0],
        pad_token_id=0,
        max_prompt_length=VERL_PROMPT_LENGTH,
        max_response_length=VERL_RESPONSE_LENGTH,
    )
    every_row = trained(outputs)
    lost = {"cut to rollout.response_length 512": sampled - every_row}
    if legacy:
        lost["legacy trainer keeps the last row"] = every_row - trained(outputs[-1:])
    return lost


def slime_lost(outcome: RolloutOutcome, sampled: int, settings: backend_slime.SlimeSettings) -> dict[str, int]:
    """Sampled tokens of one rollout that slime's samples do not train (removed samples count as lost), by cause."""
    samples = backend_slime.rollout_samples(
        Sample(prompt="", index=0, group_index=0),
        outcome,
        settings,
        max_prompt_length=None,
        max_response_length=None,
        missing_reward=0.0,
    )
    every_row = trained(samples)
    removed = trained([sample for sample in samples if sample.remove_sample])
    return {"masked or cut": sampled - every_row, "removed (failure policy mask)": removed}


@contextmanager
def stack_for(task: DemoTask, script: Path | None, run_dir: Path) -> Iterator[LocalStack]:
    """A local stack hosting ``task``'s agent, its environment set for clients while it runs."""
    settings = task.agent.settings(run_dir=run_dir, experiments=(EXP,), model=EndpointSettings(script=script))
    with LocalStack(settings) as stack, environment(stack.env):
        yield stack


def run_agent(
    name: str, task: DemoTask, script: Path | None, prompts: int, samples: int
) -> tuple[dict[str, Coverage], Counter[str]]:
    """Run ``task`` on a fresh stack and measure every framework's coverage of its rollouts."""
    coverage = {framework: Coverage() for framework in ("verl", "verl-legacy", "slime")}
    statuses: Counter[str] = Counter()
    slime_settings = backend_slime.SlimeSettings(experiment=EXP)
    rows = task.dataset(prompts, 0)
    with tempfile.TemporaryDirectory(prefix=f"coverage-{name}-") as run_dir, stack_for(task, script, Path(run_dir)):
        client = RolloutClient.for_experiment(EXP, model_id=task.model_id, poll=PollSettings(wait_time_s=1))
        with client:
            groups = client.run_groups(
                [payload for _, payload in rows],
                samples_per_prompt=samples,
                max_concurrent_sessions=len(rows) * samples,
                input_ids=[input_id for input_id, _ in rows],
                timeout=300,
                policy=FailurePolicy.ZERO_REWARD,
            )
            for group in groups:
                for item in group.items:
                    outcome = RolloutOutcome.of_item(item)
                    statuses[outcome.status] += 1
                    if outcome.error and statuses[outcome.status] == 1:
                        print(f"{name}: first {outcome.status}: {outcome.error}", file=sys.stderr)
                    sampled = sum(len(trace.completion_token_ids) for trace in outcome.token_traces)
                    coverage["verl"].add(sampled, verl_lost(outcome, sampled, legacy=False))
                    coverage["verl-legacy"].add(sampled, verl_lost(outcome, sampled, legacy=True))
                    coverage["slime"].add(sampled, slime_lost(outcome, sampled, slime_settings))
    return coverage, statuses


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=8, help="prompts per agent (default 8)")
    parser.add_argument("--samples", type=int, default=4, help="samples per prompt (default 4)")
    args = parser.parse_args(argv)
    run = results.begin("token_coverage_bench")
    coding = dataset_task(target_agent(CODING / "app.py"), CODING / "tasks.jsonl")
    agents: Mapping[str, tuple[DemoTask, Path | None]] = {
        "math": (MATH_DEMO, None),
        "coding": (coding, CODING / "stand_in.json"),
    }
    figures: dict[str, Any] = {}
    print(f"{'agent':8} {'framework':12} {'rollouts':>8} {'sampled':>8} {'trained':>8} {'ratio':>7}  shortfall")
    for name, (task, script) in agents.items():
        coverage, statuses = run_agent(name, task, script, args.prompts, args.samples)
        figures[name] = {"statuses": dict(statuses), **{fw: cov.figures() for fw, cov in coverage.items()}}
        for framework, cov in coverage.items():
            ratio = cov.trained / cov.sampled if cov.sampled else float("nan")
            causes = ", ".join(f"{cause}: {count}" for cause, count in cov.shortfall.items()) or "-"
            print(
                f"{name:8} {framework:12} {cov.rollouts:>8} {cov.sampled:>8} {cov.trained:>8} {ratio:>7.1%}  {causes}"
            )
    run.write(figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
