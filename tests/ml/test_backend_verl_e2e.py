"""verl's agent loop runs a GRPO batch on the real local stack and returns real ``AgentLoopOutput``s.

verl builds the loop from the registry entry a user writes (``hydra.utils.instantiate``) and awaits
``run(sampling_params, **row)``; the rollout goes trainer -> dispatch queue -> dispatcher -> ACR emulator ->
multi-turn agent (two model calls through its gateway session) -> S3 -> completion event -> token traces.
Every terminal status ends in verl's own post-processing (V0 padding and batching, V1 ``as_dict``).
"""

from __future__ import annotations

import asyncio
import sys
import warnings
from pathlib import Path

import pytest

pytest.importorskip("verl")
TESTS = Path(__file__).parents[1]
sys.path[:0] = [str(Path(__file__).parent), str(TESTS / "backends")]

with warnings.catch_warnings():  # verl and Ray warn at import about their own dependencies
    warnings.simplefilter("ignore")
    from verl_support import LOOP_ENTRY, build_loop, legacy_worker, tokenizer, trainer_config

from backends_e2e import TOO_BIG, cancel_once_submitted, gateway_traces, multiturn_fixtures  # noqa: E402

from local_stack.stack import LocalStack  # noqa: E402

pytestmark = pytest.mark.e2e

EXP = "verl-e2e"
PROMPT = RESPONSE = 512  # verl's defaults
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}


stack, client = multiturn_fixtures(EXP)


def _row(uid: str, index: int, **script) -> dict:
    return {"raw_prompt": [{"role": "user", "content": "Say hello."}], "uid": uid, "index": index, "extra_info": script}


def _loop(timeout_s: float = 20):
    entry = {**LOOP_ENTRY, "experiment": EXP, "rollout_timeout_s": timeout_s}
    return build_loop(entry, trainer_config(), tokenizer())


async def test_a_grpo_batch_returns_verls_outputs_for_every_terminal_status(stack: LocalStack, client):
    # GIVEN a group of two samples and one sample per failure mode, one loop object each (as verl builds them)
    rows = [
        _row("q1", 0, reward=1.0),
        _row("q1", 0, reward=1.0),
        _row("q2", 1, action="raise"),
        _row("q3", 2, sleep_s=120),
        _row("q4", 3, blob=TOO_BIG),
    ]
    # WHEN verl's worker runs them concurrently
    results = await asyncio.gather(*(_loop().run(dict(SAMPLING), **row) for row in rows))
    # THEN every rollout of q1 gives one output per row of its real traces, token for token
    for outputs in results[:2]:
        traces = gateway_traces(stack, outputs[0].extra_fields["rollout_session_id"])
        assert len(outputs) == len(traces) == 2  # the stand-in's template breaks the prefix between turns
        for output, trace in zip(outputs, traces, strict=True):
            assert output.prompt_ids == trace["prompt_token_ids"]
            assert output.response_ids == trace["completion_token_ids"]
            assert output.response_mask == [1] * len(trace["completion_token_ids"])
            assert output.response_logprobs == trace["logprobs"]
            assert (output.reward_score, output.extra_fields["rollout_status"]) == (1.0, "succeeded")
    # the agent that raised and the one that overran its deadline made their calls: zero reward, trainable
    for outputs, status in ((results[2], "agent_error"), (results[3], "timed_out")):
        assert [(o.extra_fields["rollout_status"], o.reward_score) for o in outputs] == [(status, 0.0)] * 2
        assert all(sum(o.response_mask) == len(o.response_ids) for o in outputs)
    # the refused one never ran: a masked placeholder on the chat-templated prompt
    (placeholder,) = results[4]
    assert (placeholder.extra_fields["rollout_status"], placeholder.response_mask) == ("dispatch_failed", [0])
    # AND verl's own post-processing takes all of them
    outputs = [output for result in results for output in result]
    for output in outputs:
        assert output.as_dict()["rm_scores"][-1].item() == output.reward_score  # V1's conversion
    worker = legacy_worker(trainer_config("trainer.use_v1=false"), tokenizer())
    padded = [await worker._agent_loop_postprocess(o, False, raw_prompt=rows[0]["raw_prompt"]) for o in outputs]
    batch = worker._postprocess(padded)
    assert batch.batch["input_ids"].shape == (len(outputs), PROMPT + RESPONSE)
    assert batch.batch["rollout_log_probs"].shape == (len(outputs), RESPONSE)


async def test_cancelling_verls_task_cancels_the_rollout(stack: LocalStack, client):
    run = _loop(timeout_s=300).run(dict(SAMPLING), **_row("q5", 5, sleep_s=120))
    assert len(await cancel_once_submitted(client, run)) == 1
