"""slime's hooks run GRPO groups on the real local stack: emulator, workers, stand-in model, token gateway.

trainer -> dispatch queue -> dispatcher -> ACR emulator -> multi-turn agent (two model calls through its
gateway session) -> S3 -> completion event -> token traces from the gateway -> slime ``Sample``s.
slime's modules are the stand-ins in tests/stand_ins/slime or the real slime tree named by
``AGENTCORE_STAND_INS_SLIME`` (``slime_support``); ``args`` are slime's defaults plus the README's flags
(``slime_support.slime_args``), and slime's data source loads the prompts from a file.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
TESTS = Path(__file__).parents[1]
sys.path[:0] = [str(TESTS / "backends")]

from slime_support import rollout_manager, slime_args  # noqa: E402, I001
from backends_e2e import TOO_BIG, cancel_once_submitted, gateway_traces, multiturn_fixtures  # noqa: E402
from slime.utils.types import Sample  # noqa: E402

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
    manager = rollout_manager(args)
    # WHEN slime's whole-rollout hook runs the step and slime converts it
    output = backend_slime.generate_rollout(args, 0, manager.data_source)
    samples = [sample for group in output.samples for rollout in group for sample in rollout]
    train_data = manager._convert_samples_to_train_data(samples)
    # THEN four groups of two rollouts come back, each sample in the shape slime trains on
    groups = output.samples
    assert [len(group) for group in groups] == [2, 2, 2, 2]
    for sample in samples:
        assert len(sample.loss_mask) == sample.response_length == len(sample.rollout_log_probs) >= 1
    succeeded, raised, overran, refused = groups
    assert [r[0].metadata["agentcore"]["status"] for r in overran] == ["timed_out", "timed_out"]
    assert [r[0].metadata["agentcore"]["status"] for r in refused] == ["dispatch_failed", "dispatch_failed"]
    for rollout in succeeded:
        # the stand-in's chat template closes a turn with <|im_end|> where the completion ended with </s>:
        # the second call breaks the prefix, so each call is a sample of its own, token for token
        traces = gateway_traces(stack, rollout[0].metadata["agentcore"]["session_id"])
        first, last = traces
        assert not (
            last["prompt_token_ids"][: len(first["prompt_token_ids"]) + len(first["completion_token_ids"])]
            == first["prompt_token_ids"] + first["completion_token_ids"]
        )
        assert [sample.metadata["agentcore"]["row"] for sample in rollout] == [0, 1]
        for sample, trace in zip(rollout, traces, strict=True):
            assert sample.tokens == trace["prompt_token_ids"] + trace["completion_token_ids"]
            assert sample.loss_mask == [1] * len(trace["completion_token_ids"])
            assert sample.rollout_log_probs == trace["logprobs"]
            assert (sample.status, sample.reward, sample.rollout_id) == (Sample.Status.COMPLETED, 1.0, rollout[0].index)
        # every token the policy sampled reaches the loss, under the rollout's one advantage
        assert sum(sum(sample.loss_mask) for sample in rollout) == sum(len(t["completion_token_ids"]) for t in traces)
    for rollout in raised + overran:  # both made their two calls before failing: trainable, reward 0
        assert [(s.status, s.reward, s.remove_sample, s.metadata["agentcore"]["rows"]) for s in rollout] == [
            (Sample.Status.FAILED, 0.0, False, 2)
        ] * 2
    for (sample,) in refused:  # never ran: padding
        assert (sample.status, sample.remove_sample, sample.loss_mask) == (Sample.Status.ABORTED, True, [0])
    sampled = output.metrics["agentcore/sampled_tokens"]
    assert output.metrics == {
        "agentcore/succeeded": 2,
        "agentcore/agent_error": 2,
        "agentcore/timed_out": 2,
        "agentcore/dispatch_failed": 2,
        "agentcore/sampled_tokens": sampled,
        "agentcore/trained_tokens": sampled,
        "agentcore/rows": 12,
        "agentcore/staleness_p50": 0,  # every call served by the weights of step 0, which the hook reported
        "agentcore/staleness_max": 0,
    }
    assert sum(map(sum, train_data["loss_masks"])) == sampled > 0
    # (one sample per rollout, its last row, trained only part of them: the first turns got no gradient)
    last_rows = [sum(rollout[-1].loss_mask) for group in groups[:3] for rollout in group]
    assert sum(last_rows) < sampled
    print(f"slime e2e: {len(samples)} samples; {sampled} tokens sampled and trained; last rows alone {sum(last_rows)}")


async def test_the_generate_hook_runs_one_rollout_as_its_rows_and_a_cancelled_task_cancels_its_rollout(
    stack: LocalStack, client, tmp_path, monkeypatch
):
    monkeypatch.chdir(TESTS.parent)
    args = _args(tmp_path, [_prompt(reward=0.5), _prompt(sleep_s=120)])
    first, second = rollout_manager(args).data_source.get_samples(2)
    rows = await backend_slime.generate(args, first[0], {"temperature": 1.0, "max_new_tokens": 64})
    assert [(s.status, s.reward, s.metadata["agentcore"]["row"]) for s in rows] == [
        (Sample.Status.COMPLETED, 0.5, 0),
        (Sample.Status.COMPLETED, 0.5, 1),
    ]

    # GIVEN a sample whose agent would run for two minutes
    group = second
    # WHEN slime cancels the task (abort) once the rollout is submitted
    cancelled = await cancel_once_submitted(client, backend_slime.generate(args, group[0], {}))
    # THEN the rollout ends as cancelled in the experiment's results
    assert len(cancelled) == 1
