"""The verl agent loop against verl 0.9.1's real types and its own post-processing (no Ray, no GPU)."""

from __future__ import annotations

import sys
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl")
sys.path.insert(0, str(Path(__file__).parent))

with warnings.catch_warnings():  # verl and Ray warn at import about their own dependencies
    warnings.simplefilter("ignore")
    import torch
    from hydra.errors import InstantiationException
    from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict
    from verl_support import (
        LOOP_ENTRY,
        PROMPT_LENGTH,
        RESPONSE_LENGTH,
        build_loop,
        legacy_worker,
        tokenizer,
        trainer_config,
    )

    from trainer_client.backends.verl import (
        AgentCoreAgentLoop,
        FailurePolicy,
        RolloutFailedError,
        default_payload,
        to_outputs,
    )

from rollout_contract import ErrorInfo, ResultKey, Status, Timings
from trainer_client import ClientResult, PollSettings, TokenTrace
from trainer_client._future import RolloutFuture
from trainer_client.backends import _shared

EXP = "verl-unit"
ROW = {
    "raw_prompt": [{"role": "user", "content": "what is 2 + 2 ?"}],
    "uid": "prompt-7",
    "index": 7,
    "reward_model": {"ground_truth": "4"},
    "agent_name": "agentcore",
    "global_steps": 3,
    "session_id": 0,
}
#: Two calls that extend each other (one row), then one that re-rendered the history (a second row).
TRACES = [
    {"prompt_token_ids": [3, 6, 7], "completion_token_ids": [8, 1], "logprobs": [-0.5, -0.1]},
    {"prompt_token_ids": [3, 6, 7, 8, 1, 5, 9], "completion_token_ids": [10], "logprobs": [-0.2]},
    {"prompt_token_ids": [3, 6, 7, 8, 5, 9, 10], "completion_token_ids": [8, 1], "logprobs": [-0.3, -0.4]},
]


def result(status: Status = Status.SUCCEEDED, traces: list[dict[str, Any]] | None = None, reward=1.0) -> ClientResult:
    key = ResultKey(EXP, "prompt-7", str(uuid.uuid4()))
    if status is Status.SUCCEEDED:
        stored = ClientResult.from_handler_output(
            {"rewards": reward}, key=key, s3_bucket="b", payload={}, timings=Timings()
        )
    else:
        stored = ClientResult.terminal(status, key=key, s3_bucket="b", error=ErrorInfo(type="E", message="boom"))
    messages = [{"role": "user", "content": "q"}]
    stored.token_traces = [
        TokenTrace(trace_id=str(i), session_id=key.session_id, messages=messages * (i + 1), **trace)
        for i, trace in enumerate(traces or [])
    ]
    return stored


def outcome(res: ClientResult) -> _shared.RolloutOutcome:
    error = None if res.status is Status.SUCCEEDED else f"{res.status.value}: boom"
    return _shared.RolloutOutcome(res.status.value, res, error, 2.5)


def outputs(res: ClientResult, policy=FailurePolicy.ZERO_REWARD) -> list[AgentLoopOutput]:
    return to_outputs(
        outcome(res),
        policy=policy,
        prompt_ids=lambda: [3, 6, 7],
        pad_token_id=0,
        max_prompt_length=PROMPT_LENGTH,
        max_response_length=RESPONSE_LENGTH,
    )


def test_a_prefix_break_gives_two_real_outputs_with_mask_logprobs_and_reward():
    first, second = outputs(result(traces=TRACES, reward=0.75))
    assert (first.prompt_ids, first.response_ids) == ([3, 6, 7], [8, 1, 5, 9, 10])
    assert first.response_mask == [1, 1, 0, 0, 1]
    assert first.response_logprobs == [-0.5, -0.1, 0.0, 0.0, -0.2]
    assert (second.prompt_ids, second.response_ids, second.response_mask) == ([3, 6, 7, 8, 5, 9, 10], [8, 1], [1, 1])
    assert [o.reward_score for o in (first, second)] == [0.75, 0.75]
    assert (first.num_turns, second.num_turns) == (3, 4)  # messages of the row's last call + the answer
    assert first.extra_fields["rollout_status"] == "succeeded"


def test_verl_v1_converts_our_outputs_to_tensors_with_the_reward_on_the_last_token():
    # verl's V1 worker stores output.as_dict() per output
    fields = outputs(result(traces=TRACES[:2], reward=0.5))[0].as_dict()
    assert fields["responses"].tolist() == [8, 1, 5, 9, 10]
    assert fields["response_mask"].tolist() == [1, 1, 0, 0, 1]
    assert torch.allclose(fields["rollout_log_probs"], torch.tensor([-0.5, -0.1, 0.0, 0.0, -0.2]))
    assert fields["rm_scores"].tolist() == [0.0, 0.0, 0.0, 0.0, 0.5]


def test_verl_v1_stores_a_rollouts_rows_as_one_tensordict():
    # what AgentLoopWorkerTQ._agent_loop_postprocess builds per output before putting them in TransferQueue
    ours = outputs(result(traces=TRACES)) + outputs(result(Status.DISPATCH_FAILED))
    fields = []
    for output in ours:
        field = output.as_dict()
        field.update(uid=ROW["uid"], session_id=0, global_steps=ROW["global_steps"])
        field["loss_mask"] = field["response_mask"]
        fields.append(field)
    stored = list_of_dict_to_tensordict(fields)
    assert stored.batch_size == torch.Size([3])
    assert [row.tolist() for row in stored["responses"].unbind()] == [[8, 1, 5, 9, 10], [8, 1], [0]]
    assert [row.tolist() for row in stored["loss_mask"].unbind()] == [[1, 1, 0, 0, 1], [1, 1], [0]]


async def test_verl_legacy_worker_pads_and_batches_our_outputs_with_placeholders():
    # GIVEN a succeeded output and the placeholder of a failure without traces
    tok, config = tokenizer(), trainer_config(use_v1=False)
    worker = legacy_worker(config, tok)
    ours = outputs(result(traces=TRACES[:2])) + outputs(result(Status.DISPATCH_FAILED))
    # WHEN verl's own post-processing pads them and builds the batch
    internal = [await worker._agent_loop_postprocess(o, False, raw_prompt=ROW["raw_prompt"]) for o in ours]
    batch = worker._postprocess(internal)
    # THEN shapes are verl's, masks survive padding, and the placeholder trains nothing
    assert batch.batch["responses"].shape == (2, RESPONSE_LENGTH)
    assert batch.batch["response_mask"][0, :6].tolist() == [1, 1, 0, 0, 1, 0]
    assert batch.batch["response_mask"][1].sum().item() == 0
    assert batch.batch["rm_scores"][:, :5].tolist()[0] == [0.0, 0.0, 0.0, 0.0, 1.0]
    assert batch.batch["rm_scores"][1].sum().item() == 0.0


@pytest.mark.parametrize(
    ("policy", "expected_mask", "expected_reward"),
    [(FailurePolicy.ZERO_REWARD, [1, 1, 0, 0, 1], 0.0), (FailurePolicy.MASK, [0, 0, 0, 0, 0], 0.0)],
)
def test_a_failed_rollout_with_traces_scores_zero(policy, expected_mask, expected_reward):
    (out,) = outputs(result(Status.AGENT_ERROR, traces=TRACES[:2]), policy)
    assert (out.response_mask, out.reward_score) == (expected_mask, expected_reward)
    assert out.extra_fields["rollout_error"] == "agent_error: boom"


def test_a_failure_without_traces_is_a_masked_placeholder_or_dropped():
    (placeholder,) = outputs(result(Status.TIMED_OUT))
    assert (placeholder.prompt_ids, placeholder.response_ids, placeholder.response_mask) == ([3, 6, 7], [0], [0])
    assert placeholder.reward_score == 0.0
    assert outputs(result(Status.TIMED_OUT), FailurePolicy.DROP) == []


def test_the_default_payload_is_json_and_leaves_verl_internals_out():
    np = pytest.importorskip("numpy")
    payload = default_payload({**ROW, "raw_prompt": np.array(ROW["raw_prompt"], dtype=object), "index": np.int64(7)})
    assert payload == {"prompt": ROW["raw_prompt"], "index": 7, "reward_model": {"ground_truth": "4"}}


class _FakeClient:
    """Resolves every rollout at once with a prepared result (the local stack does this for real in e2e)."""

    poll_settings = PollSettings()

    def __init__(self, res: ClientResult) -> None:
        self.res = res
        self.calls: list[tuple[dict[str, Any], str, float, dict[str, Any]]] = []

    async def invoke_async(self, payload, session_id=None, input_id=None, timeout=0.0, **overrides):
        self.calls.append((payload, input_id, timeout, overrides))
        future = RolloutFuture(ResultKey(EXP, input_id, self.res.session_id), "b", deadline_at=time.time() + timeout)
        future.set_result(self.res)
        return future


@pytest.fixture
def fake_client():
    def install(res: ClientResult) -> _FakeClient:
        client = _FakeClient(res)
        _shared.shared_client(EXP, factory=lambda *args, **kwargs: client)
        return client

    yield install
    _shared._clients.clear()


@pytest.mark.parametrize("use_v1", [True, False])
async def test_the_loop_verl_instantiates_runs_one_rollout_in_the_rows_group(fake_client, use_v1):
    # GIVEN the YAML entry a user registers, instantiated as verl does
    client = fake_client(result(traces=TRACES))
    entry = {**LOOP_ENTRY, "experiment": EXP, "rollout_timeout_s": 90}
    loop = build_loop(entry, trainer_config(use_v1=use_v1), tokenizer())
    assert isinstance(loop, AgentCoreAgentLoop)
    # WHEN verl runs it on a dataset row
    out = await loop.run({"temperature": 1.0, "top_p": 1.0, "logprobs": True}, **ROW)
    # THEN one rollout was submitted in the row's group with verl's sampling params
    ((payload, input_id, timeout, overrides),) = client.calls
    assert (payload["prompt"], input_id, timeout) == (ROW["raw_prompt"], "prompt-7", 90.0)
    assert overrides == {"sampling_params": {"temperature": 1.0, "top_p": 1.0, "logprobs": True}}
    # and V1 gets every row, the legacy trainer the last one
    if use_v1:
        assert [o.response_ids for o in out] == [[8, 1, 5, 9, 10], [8, 1]]
    else:
        assert isinstance(out, AgentLoopOutput)
        assert (out.response_ids, out.extra_fields["rows_dropped"]) == ([8, 1], 1)


async def test_the_raise_policy_fails_the_sample_so_verl_marks_its_group(fake_client):
    fake_client(result(Status.AGENT_ERROR))
    loop = build_loop({**LOOP_ENTRY, "experiment": EXP, "failure_policy": "raise"}, trainer_config(), tokenizer())
    with pytest.raises(RolloutFailedError, match="agent_error: boom"):
        await loop.run({}, **ROW)


def test_drop_is_refused_with_the_legacy_trainer_which_needs_an_output_per_sample(fake_client):
    fake_client(result())
    entry = {**LOOP_ENTRY, "experiment": EXP, "failure_policy": "drop"}
    with pytest.raises(InstantiationException, match="trainer.use_v1=true"):  # hydra wraps the ValueError
        build_loop(entry, trainer_config(use_v1=False), tokenizer())


async def test_a_placeholder_prompt_comes_from_the_chat_template(fake_client):
    fake_client(result(Status.DISPATCH_FAILED))
    tok = tokenizer()
    loop = build_loop({**LOOP_ENTRY, "experiment": EXP}, trainer_config(), tok)
    (out,) = await loop.run({}, **ROW)
    expected = tok.apply_chat_template(ROW["raw_prompt"], add_generation_prompt=True, tokenize=True, return_dict=False)
    assert out.prompt_ids == list(expected)
    assert (out.response_ids, out.response_mask, out.reward_score) == ([tok.pad_token_id], [0], 0.0)
