"""slime's hooks run GRPO groups on the real local stack: emulator, workers, stand-in model, token gateway.

trainer -> dispatch queue -> dispatcher -> ACR emulator -> multi-turn agent (two model calls through its
gateway session) -> S3 -> completion event -> token traces from the gateway -> slime ``Sample``s.
slime's modules are the stand-ins in tests/stand_ins/slime; ``args`` are slime's defaults plus the README's
flags (``slime_support.slime_args``), and slime's data source loads the prompts from a file.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
TESTS = Path(__file__).parents[1]
sys.path[:0] = [str(TESTS / "stand_ins" / "slime"), str(TESTS / "backends")]

from backends_e2e import TOO_BIG, cancel_once_submitted, gateway_traces, multiturn_fixtures  # noqa: E402
from slime.ray.rollout import RolloutManager  # noqa: E402
from slime.utils.types import Sample  # noqa: E402
from slime_support import slime_args  # noqa: E402

from local_stack.stack import LocalStack  # noqa: E402
from trainer_client.backends import slime as backend_slime  # noqa: E402

pytestmark = pytest.mark.e2e

EXP = "slime-e2e"


stack, client = multiturn_fixtures(EXP)


def _args(tmp_path: Path, rows: list[dict], *flags: str):
    config = {"agentcore_experiment": EXP, "agentcore_rollout_timeout_s": 20}
    return slime_args(tmp_path, rows, "--rollout-max-response-len", "512", *flags, config=config)


def _prompt(**script) -> dict:
    return {"prompt": "Say hello.", "answer": "hello", "metadata": script}


def test_generate_rollout_turns_a_grpo_step_into_slime_samples_for_every_status(
    stack: LocalStack, client, tmp_path, monkeypatch
):
    # GIVEN four prompts of two samples: succeeding, raising, overrunning the 20 s deadline, refused
    monkeypatch.chdir(TESTS.parent)
    prompts = [_prompt(reward=1.0), _prompt(action="raise"), _prompt(sleep_s=120), _prompt(blob=TOO_BIG)]
    args = _args(tmp_path, prompts)
    # WHEN slime's whole-rollout hook runs the step
    output = backend_slime.generate_rollout(args, 0, RolloutManager(args).data_source)
    # THEN four groups of two come back, each sample in the shape slime trains on
    groups = output.samples
    assert [len(group) for group in groups] == [2, 2, 2, 2]
    for sample in (s for group in groups for s in group):
        assert len(sample.loss_mask) == sample.response_length == len(sample.rollout_log_probs) >= 1
    succeeded, raised, overran, refused = groups
    assert [s.metadata["agentcore"]["status"] for s in overran] == ["timed_out", "timed_out"]
    assert [s.metadata["agentcore"]["status"] for s in refused] == ["dispatch_failed", "dispatch_failed"]
    for sample in succeeded:
        # the stand-in's chat template closes a turn with <|im_end|> where the completion ended with </s>:
        # the second call breaks the prefix, so the sample is the last call's row, token for token
        first, last = gateway_traces(stack, sample.metadata["agentcore"]["session_id"])
        assert not (
            last["prompt_token_ids"][: len(first["prompt_token_ids"]) + len(first["completion_token_ids"])]
            == first["prompt_token_ids"] + first["completion_token_ids"]
        )
        assert sample.metadata["agentcore"]["rows"] == 2
        assert sample.tokens == last["prompt_token_ids"] + last["completion_token_ids"]
        assert sample.loss_mask == [1] * len(last["completion_token_ids"])
        assert sample.rollout_log_probs == last["logprobs"]
        assert (sample.status, sample.reward) == (Sample.Status.COMPLETED, 1.0)
    for sample in raised + overran:  # both made their two calls before failing: trainable, reward 0
        assert (sample.status, sample.reward, sample.remove_sample) == (Sample.Status.FAILED, 0.0, False)
        assert sample.metadata["agentcore"]["rows"] == 2
    for sample in refused:  # never ran: padding
        assert (sample.status, sample.remove_sample, sample.loss_mask) == (Sample.Status.ABORTED, True, [0])
    assert output.metrics == {
        "agentcore/succeeded": 2,
        "agentcore/agent_error": 2,
        "agentcore/timed_out": 2,
        "agentcore/dispatch_failed": 2,
    }


async def test_the_generate_hook_runs_one_sample_and_a_cancelled_task_cancels_its_rollout(
    stack: LocalStack, client, tmp_path, monkeypatch
):
    monkeypatch.chdir(TESTS.parent)
    args = _args(tmp_path, [_prompt(reward=0.5), _prompt(sleep_s=120)])
    first, second = RolloutManager(args).data_source.get_samples(2)
    sample = await backend_slime.generate(args, first[0], {"temperature": 1.0, "max_new_tokens": 64})
    assert (sample.status, sample.reward, sample.metadata["agentcore"]["rows"]) == (Sample.Status.COMPLETED, 0.5, 2)

    # GIVEN a sample whose agent would run for two minutes
    group = second
    # WHEN slime cancels the task (abort) once the rollout is submitted
    cancelled = await cancel_once_submitted(client, backend_slime.generate(args, group[0], {}))
    # THEN the rollout ends as cancelled in the experiment's results
    assert len(cancelled) == 1
