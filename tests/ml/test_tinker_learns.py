"""The closed loop through the Tinker API: the lookup task on the local stack, trained by our Tinker adapter.

``examples.grpo_local.tinker`` end to end (local stack with the Tinker endpoint, the lookup agent in the ACR
emulator, the adapter's sampler behind the token gateway), three short steps: every step's rollouts are traced
and trained, the logprobs Tinker's forward pass gives the trained tokens match the sampler's (the closed loop's
1e-4), no trace was served by other weights, and the sampler's weight version follows the optimizer steps. That
the reward rises takes longer runs than a test should (``python -m examples.grpo_local.tinker``, README).
"""

import json

import pytest

torch = pytest.importorskip("torch")
tinker = pytest.importorskip("tinker")

from examples.grpo_local.checks import LOGPROB_TOLERANCE  # noqa: E402
from examples.grpo_local.tinker import LoopSettings, run  # noqa: E402

pytestmark = pytest.mark.e2e

STEPS = 3


def test_the_closed_loop_through_the_tinker_api_is_token_exact_and_on_policy(tmp_path):
    summary = run(LoopSettings(tmp_path / "out", tmp_path / "stack", steps=STEPS, prompts=4, samples=4))
    steps = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert [step["step"] for step in steps] == list(range(1, STEPS + 1))
    # Every step had a signal and took one optimizer step; the sampler of step k served k - 1 steps' weights.
    assert [step["weight_version"] for step in steps] == list(range(STEPS))
    assert [step["optimizer_steps"] for step in steps] == list(range(1, STEPS + 1))
    assert all(step["trained_tokens"] > 0 and step["traces"] > 0 and step["off_policy_traces"] == 0 for step in steps)
    assert summary["token_exact"] and summary["logprob_max_abs_diff"] <= LOGPROB_TOLERANCE
    assert all(step["rollouts"] == 16 and step["failed"] == 0 for step in steps)
    assert (tmp_path / "out" / "tinker_local.png").stat().st_size > 0
