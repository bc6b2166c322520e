"""The stand-in model through the openai client: tool call, then ``#### N``; token fields; error rate."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from starlette.testclient import TestClient

from local_stack._process import ManagedProcess
from local_stack.hosting import DEFAULT_MODEL_NAME
from local_stack.model_endpoint import EndpointSettings, create_app, mistake_probability
from local_stack.model_endpoint.tokenizer import EOS_ID
from local_stack.problems import generate_problems, parse_problem

pytestmark = pytest.mark.processes

CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
    },
}
PROBLEM = generate_problems(1, seed=7)[0]
ANSWER = PROBLEM["answer"]
TOKEN_FIELDS = {"return_token_ids": True}


@pytest.fixture(scope="module")
def client(model: ManagedProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{model.url}/v1", api_key="unused", max_retries=0) as client:
        yield client


def _tool_round(client: openai.OpenAI) -> list[dict[str, Any]]:
    """The conversation after the model called the calculator and the tool answered."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": PROBLEM["prompt"]}]
    response = client.chat.completions.create(model="any", messages=messages, tools=[CALCULATOR], temperature=0)
    (call,) = response.choices[0].message.tool_calls
    result = str(parse_problem(PROBLEM["prompt"]).answer)
    return messages + [
        {"role": "assistant", "tool_calls": [call.model_dump(exclude_none=True)]},
        {"role": "tool", "tool_call_id": call.id, "content": result},
    ]


def test_model_calls_the_calculator_then_answers_with_the_final_line(client: openai.OpenAI) -> None:
    # GIVEN a math problem and a calculator tool
    messages = [{"role": "user", "content": f"Solve this.\n{PROBLEM['prompt']}"}]
    # WHEN the model is asked
    first = client.chat.completions.create(model="any", messages=messages, tools=[CALCULATOR], temperature=0)
    # THEN it calls the calculator with the problem's expression
    (call,) = first.choices[0].message.tool_calls
    assert first.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "calculator"
    assert json.loads(call.function.arguments) == {"expression": parse_problem(PROBLEM["prompt"]).expression}
    # AND given the tool's result, it answers with reasoning and "#### N"
    second = client.chat.completions.create(
        model="any", messages=_tool_round(client), tools=[CALCULATOR], temperature=0
    )
    content = second.choices[0].message.content
    assert second.choices[0].finish_reason == "stop"
    assert content.endswith(f"#### {ANSWER}") and "calculator" in content


def test_streaming_gives_the_same_tool_call_and_answer(client: openai.OpenAI) -> None:
    # GIVEN the same problem, asked the way Strands asks (stream with usage)
    messages = [{"role": "user", "content": PROBLEM["prompt"]}]
    # WHEN the model streams its tool call
    chunks = list(
        client.chat.completions.create(
            model="any",
            messages=messages,
            tools=[CALCULATOR],
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
            extra_body=TOKEN_FIELDS,
        )
    )
    # THEN the call arrives as deltas with an id and name first, the usage chunk last
    deltas = [c.choices[0].delta.tool_calls[0] for c in chunks if c.choices and c.choices[0].delta.tool_calls]
    assert deltas[0].id and deltas[0].function.name == "calculator"
    arguments = "".join(d.function.arguments or "" for d in deltas)
    assert json.loads(arguments)["expression"] == parse_problem(PROBLEM["prompt"]).expression
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    # AND the answer streams as text ending in "#### N"
    stream = client.chat.completions.create(
        model="any", messages=_tool_round(client), tools=[CALCULATOR], temperature=0, stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text.endswith(f"#### {ANSWER}")


def test_token_ids_and_logprobs_come_in_vllm_fields_one_logprob_per_token(client: openai.OpenAI) -> None:
    # GIVEN a request asking for logprobs and token ids
    messages = [{"role": "user", "content": PROBLEM["prompt"]}]
    # WHEN the model answers
    raw = client.chat.completions.create(
        model="any", messages=messages, tools=[CALCULATOR], logprobs=True, extra_body=TOKEN_FIELDS
    ).model_dump()
    # THEN prompt ids sit at the root, completion ids (ending in EOS) and logprobs on the choice, aligned
    choice = raw["choices"][0]
    assert raw["prompt_token_ids"] and all(isinstance(i, int) for i in raw["prompt_token_ids"])
    assert choice["token_ids"][-1] == EOS_ID
    logprobs = [entry["logprob"] for entry in choice["logprobs"]["content"]]
    assert len(logprobs) == len(choice["token_ids"]) == raw["usage"]["completion_tokens"]
    assert all(lp <= 0 for lp in logprobs)


def test_streamed_chunks_carry_prompt_ids_first_and_token_ids_per_chunk(model: ManagedProcess) -> None:
    # GIVEN a streaming request with logprobs and token ids
    body = {
        "messages": [{"role": "user", "content": PROBLEM["prompt"]}],
        "stream": True,
        "logprobs": True,
        **TOKEN_FIELDS,
    }
    # WHEN the SSE stream is read
    with httpx.stream("POST", f"{model.url}/v1/chat/completions", json=body, timeout=10) as response:
        lines = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    chunks = [json.loads(line) for line in lines[:-1]]
    # THEN it ends with [DONE]; only the first chunk has prompt ids; ids and logprobs align chunk by chunk
    assert lines[-1] == "[DONE]"
    assert "prompt_token_ids" in chunks[0] and all("prompt_token_ids" not in c for c in chunks[1:])
    for chunk in chunks:
        choice = chunk["choices"][0]
        assert len(choice["token_ids"]) == len(choice["logprobs"]["content"])
    assert chunks[-1]["choices"][0]["token_ids"][-1] == EOS_ID


def test_token_fields_are_absent_unless_asked_for(client: openai.OpenAI) -> None:
    # GIVEN a plain request
    messages = [{"role": "user", "content": PROBLEM["prompt"]}]
    # WHEN the model answers
    raw = client.chat.completions.create(model="any", messages=messages, tools=[CALCULATOR]).model_dump()
    # THEN there are no vLLM token fields and no logprobs
    assert "prompt_token_ids" not in raw and "token_ids" not in raw["choices"][0]
    assert raw["choices"][0]["logprobs"] is None


def _error_rate(client: openai.OpenAI, temperature: float, samples: int) -> float:
    messages = _tool_round(client)
    wrong = 0
    for _ in range(samples):
        response = client.chat.completions.create(
            model="any", messages=messages, tools=[CALCULATOR], temperature=temperature
        )
        wrong += not response.choices[0].message.content.endswith(f"#### {ANSWER}")
    return wrong / samples


def test_error_rate_is_zero_at_temperature_zero_and_clearly_positive_when_hot(client: openai.OpenAI) -> None:
    # GIVEN the conversation after the calculator answered
    # WHEN it is sampled repeatedly at temperature 0 and at temperature 2
    cold, hot = _error_rate(client, 0.0, 30), _error_rate(client, 2.0, 150)
    # THEN greedy answers are always right, hot ones wrong at about the documented rate (0.43)
    assert cold == 0.0
    assert mistake_probability(2.0) == pytest.approx(0.432, abs=0.001)
    assert 0.25 < hot < 0.62


def test_same_seed_gives_the_same_answer_and_repeats_differ(client: openai.OpenAI) -> None:
    # GIVEN the post-tool conversation at a high temperature
    messages = _tool_round(client)

    def ask(**extra: Any) -> str:
        response = client.chat.completions.create(
            model="any", messages=messages, tools=[CALCULATOR], temperature=2.0, logprobs=True, **extra
        )
        return response.model_dump_json(include={"choices"})

    # WHEN the same request is sent twice with a seed, and many times without
    # THEN the seeded ones are identical and the unseeded ones are not all the same
    assert ask(seed=11) == ask(seed=11)
    assert len({ask() for _ in range(10)}) > 1


def test_unknown_prompt_gets_a_polite_answer(client: openai.OpenAI) -> None:
    # GIVEN a prompt that is not one of the example problems
    # WHEN the model is asked, even with a calculator on offer
    response = client.chat.completions.create(
        model="any", messages=[{"role": "user", "content": "What is the capital of France?"}], tools=[CALCULATOR]
    )
    # THEN it answers politely, without calling a tool
    assert response.choices[0].message.tool_calls is None
    assert "stand-in model" in response.choices[0].message.content


def test_bad_requests_get_a_400_saying_what_is_wrong(model: ManagedProcess) -> None:
    # GIVEN requests with no messages, a bad temperature, and non-JSON
    url = f"{model.url}/v1/chat/completions"
    # WHEN they are sent
    no_messages = httpx.post(url, json={"model": "m"})
    bad_temperature = httpx.post(url, json={"messages": [{"role": "user", "content": "x"}], "temperature": 9})
    not_json = httpx.post(url, content=b"{", headers={"content-type": "application/json"})
    # THEN each is a 400 in OpenAI's error shape naming the problem
    assert no_messages.status_code == bad_temperature.status_code == not_json.status_code == 400
    assert no_messages.json()["error"]["param"] == "messages"
    assert "temperature" in bad_temperature.json()["error"]["message"]
    assert "not valid JSON" in not_json.json()["error"]["message"]


def test_models_lists_the_served_model(client: openai.OpenAI) -> None:
    # GIVEN the running model endpoint
    # WHEN its models are listed
    models = client.models.list()
    # THEN the stand-in's name is there
    assert [m.id for m in models.data] == [DEFAULT_MODEL_NAME]


def test_simulated_latency_delays_each_call() -> None:
    # GIVEN an endpoint with 0.3 s of simulated latency per call
    with TestClient(create_app(EndpointSettings(latency_s=0.3))) as client:
        started = time.monotonic()
        # WHEN one call is made
        response = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
        # THEN it takes at least that long
        assert response.status_code == 200
        assert time.monotonic() - started >= 0.3


def test_the_moe_variant_returns_every_fed_tokens_routing_as_vllm_does_and_the_same_for_a_longer_prompt() -> None:
    # GIVEN the stand-in as a tiny mixture of experts
    http = TestClient(create_app(EndpointSettings(moe=True)))
    body = {"model": "any", "messages": [{"role": "user", "content": PROBLEM["prompt"]}], **TOKEN_FIELDS}
    # WHEN it answers, plain and streamed
    answer = http.post("/v1/chat/completions", json=body).json()
    choice = answer["choices"][0]
    fed = answer["prompt_token_ids"] + choice["token_ids"]
    # THEN the choice carries [token][layer][k] for every token fed through the model (all but the last)
    routing = choice["routed_experts"]
    assert len(routing) == len(fed) - 1 and {(len(row), len(row[0])) for row in routing} == {(4, 2)}
    chunks = [
        json.loads(line.removeprefix("data: "))
        for line in http.post("/v1/chat/completions", json={**body, "stream": True}).text.splitlines()
        if line.startswith("data: {")
    ]
    streamed = [
        chunk["choices"][0]["routed_experts"] for chunk in chunks if "routed_experts" in (chunk["choices"] or [{}])[0]
    ]
    assert len(streamed) == 1 and len(streamed[0]) == len(routing)
    # AND a later call whose prompt holds this answer routes those tokens as they were routed when decoded
    follow_up = {**body, "messages": [*body["messages"], choice["message"], {"role": "user", "content": "Sure?"}]}
    later = http.post("/v1/chat/completions", json=follow_up).json()
    common = len(os.path.commonprefix([fed, later["prompt_token_ids"]]))
    assert common > len(answer["prompt_token_ids"])  # the answer's first tokens are in the later prompt
    assert later["choices"][0]["routed_experts"][: common - 1] == routing[: common - 1]
    # AND without --moe there is no routing
    plain = TestClient(create_app(EndpointSettings())).post("/v1/chat/completions", json=body).json()
    assert "routed_experts" not in plain["choices"][0]
