"""The transformer policy's token contract, and the GRPO example's checks catching broken masks and alignment.

A two-call lookup episode (tool call, spliced tool result, answer) is played against the real policy server
app in-process; its traces are what the gateway records. The checks must pass on them and fail on each
corruption a trainer bug produces: logprobs shifted by one token, a spliced token trained on, a token lost,
a trace sampled by other weights.
"""

import copy
import io

import pytest

torch = pytest.importorskip("torch")

from starlette.testclient import TestClient  # noqa: E402

from examples.grpo_local.checks import LOGPROB_TOLERANCE, BatchChecks, TrainingRow  # noqa: E402
from examples.grpo_local.task import LOOKUP_TOOL  # noqa: E402
from local_stack.model_endpoint import EndpointSettings, create_app  # noqa: E402
from local_stack.tiny_policy import (  # noqa: E402
    ChatTokenizer,
    PolicyConfig,
    SamplingRequest,
    build_model,
    sample_batch,
    sequence_logprobs,
)
from trainer_client import TokenTrace  # noqa: E402

TOKENIZER = ChatTokenizer()


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(EndpointSettings(policy="transformer"))) as test_client:
        yield test_client


def _push(client, model, version):
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    headers = {"content-type": "application/octet-stream"}
    response = client.post(f"/v1/weights?version={version}", content=buffer.getvalue(), headers=headers)
    assert response.json() == {"weight_version": version}


def _chat(client, messages, **params):
    body = {"model": "tiny", "messages": messages, "tools": [LOOKUP_TOOL], "logprobs": True, "return_token_ids": True}
    response = client.post("/v1/chat/completions", json={**body, **params})
    assert response.status_code == 200, response.text
    return response.json()


def _trace(index, messages, response):
    choice = response["choices"][0]
    return TokenTrace(
        trace_id=f"t{index}",
        session_id="s",
        messages=messages,
        prompt_token_ids=response["prompt_token_ids"],
        completion_token_ids=choice["token_ids"],
        logprobs=[entry["logprob"] for entry in choice["logprobs"]["content"]],
        finish_reason=choice["finish_reason"],
        response_message=choice["message"],
        raw_response=response,
    )


@pytest.fixture(scope="module")
def episode(client):
    """A lookup episode under weights that call the tool after some text, then answer: (model, traces)."""
    model = build_model(PolicyConfig())
    with torch.no_grad():
        model.head.bias[TOKENIZER.encode("ab")] = 3.0  # some text first
        model.head.bias[TOKENIZER.tool_call_id] = 4.0
    _push(client, model, version=3)
    messages = [{"role": "user", "content": "what is the secret? use lookup"}]
    # The first seed (deterministic) whose turn is text, then the tool call.
    first = next(
        response
        for seed in range(50)
        if (response := _chat(client, messages, max_tokens=12, seed=seed))["choices"][0]["message"]["content"]
        and response["choices"][0]["finish_reason"] == "tool_calls"
    )
    message = first["choices"][0]["message"]
    assert message["tool_calls"][0]["function"] == {"name": "lookup", "arguments": "{}"}
    second_messages = [
        *messages,
        {"role": "assistant", "content": message["content"], "tool_calls": message["tool_calls"]},
        {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": "7"},
    ]
    second = _chat(client, second_messages, max_tokens=5, seed=2, tool_choice="none")
    return model, [_trace(0, messages, first), _trace(1, second_messages, second)]


def _checked(traces, model, step=3):
    checks = BatchChecks()
    rows = [TrainingRow.of(row, 1.0) for row in checks.check_rollout(traces, step)]
    checks.compare_logprobs(rows, lambda ids: sequence_logprobs(model, ids))
    return checks


def test_the_server_reports_a_weight_version_and_exact_multi_turn_ids(episode):
    model, traces = episode
    first, second = traces
    assert first.raw_response["weight_version"] == second.raw_response["weight_version"] == 3
    assert second.prompt_token_ids[: len(first.prompt_token_ids) + len(first.completion_token_ids)] == [
        *first.prompt_token_ids,
        *first.completion_token_ids,
    ]
    assert TOKENIZER.decode(first.completion_token_ids).endswith("<tool_call>")


def test_the_checks_pass_on_the_real_episode(episode):
    model, traces = episode
    checks = _checked(traces, model)
    assert checks.passed, checks
    assert checks.logprob_max_abs_diff <= LOGPROB_TOLERANCE
    assert checks.tokens_checked == sum(len(t.completion_token_ids) for t in traces)
    spliced = "<|im_start|>tool\n7<|im_end|><|im_start|>assistant\n"
    assert checks.spliced_tokens == len(TOKENIZER.encode(spliced))


def test_logprobs_shifted_by_one_token_are_caught(episode):
    model, traces = episode
    shifted = copy.deepcopy(traces)
    shifted[1].logprobs = shifted[1].logprobs[1:] + shifted[1].logprobs[:1]
    checks = _checked(shifted, model)
    assert checks.logprob_max_abs_diff > LOGPROB_TOLERANCE
    assert not checks.passed


def test_a_spliced_token_trained_on_is_caught(episode, monkeypatch):
    model, traces = episode
    import examples.grpo_local.checks as checks_module

    real = checks_module.assemble_rows

    def leaky(calls):
        rows = real(calls)
        rows[0].response_mask[rows[0].response_mask.index(0)] = 1
        return rows

    monkeypatch.setattr(checks_module, "assemble_rows", leaky)
    checks = _checked(traces, model)
    assert checks.mask_errors == 1
    assert not checks.passed


def test_a_lost_completion_token_is_caught(episode):
    model, traces = episode
    lost = copy.deepcopy(traces)
    lost[1].completion_token_ids = lost[1].completion_token_ids[:-1]
    lost[1].logprobs = lost[1].logprobs[:-1]
    lost[0].completion_token_ids = lost[0].completion_token_ids[1:]
    lost[0].logprobs = lost[0].logprobs[1:]
    checks = _checked(lost, model)
    assert checks.rows_split or checks.ids_mismatches
    assert not checks.passed


def test_traces_from_other_weights_are_caught(episode):
    model, traces = episode
    checks = _checked(traces, model, step=4)
    assert checks.version_mismatches == 2
    assert checks.as_record()["off_policy_fraction"] == 1.0
    assert not checks.passed


def test_other_weights_give_other_logprobs(episode):
    _, traces = episode
    checks = _checked(traces, build_model(PolicyConfig(seed=1)))
    assert checks.logprob_max_abs_diff > LOGPROB_TOLERANCE


def test_sampling_parameters_are_honoured(client, episode):
    messages = [{"role": "user", "content": "hi"}]
    one = _chat(client, messages, max_tokens=4, seed=5, temperature=1.0)
    again = _chat(client, messages, max_tokens=4, seed=5, temperature=1.0)
    assert one["choices"][0]["token_ids"] == again["choices"][0]["token_ids"]
    assert len(one["choices"][0]["token_ids"]) <= 4
    greedy = [_chat(client, messages, max_tokens=4, seed=s, temperature=0)["choices"][0]["token_ids"] for s in (1, 2)]
    assert greedy[0] == greedy[1]
    nucleus_of_one = _chat(client, messages, max_tokens=6, seed=5, temperature=1.0, top_p=1e-6)
    greedy = _chat(client, messages, max_tokens=6, temperature=0)
    assert nucleus_of_one["choices"][0]["token_ids"] == greedy["choices"][0]["token_ids"]


def test_bad_requests_get_clear_errors(client):
    outside = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "café"}]})
    assert outside.status_code == 400 and "vocabulary" in outside.json()["error"]["message"]
    two_tools = client.post(
        "/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}], "tools": [LOOKUP_TOOL] * 2}
    )
    assert two_tools.status_code == 400 and "one tool" in two_tools.json()["error"]["message"]
    bad_weights = client.post("/v1/weights", json={"path": "/nonexistent/weights.pt"})
    assert bad_weights.status_code == 400 and "could not load" in bad_weights.json()["error"]["message"]


def test_a_batch_samples_what_each_request_samples_alone():
    model = build_model(PolicyConfig(seed=2))

    def request(prompt, seed):
        generator = torch.Generator().manual_seed(seed)
        return SamplingRequest(prompt, 6, frozenset({TOKENIZER.im_end_id}), 1.0, 1.0, generator)

    prompts = [TOKENIZER.encode("short"), TOKENIZER.encode("a much longer prompt than the other")]
    alone = [sample_batch(model, [request(prompt, seed)])[0] for seed, prompt in enumerate(prompts)]
    together = sample_batch(model, [request(prompt, seed) for seed, prompt in enumerate(prompts)])
    for one, batched in zip(alone, together, strict=True):
        assert one.token_ids == batched.token_ids
        assert one.logprobs == pytest.approx(batched.logprobs, abs=1e-5)
