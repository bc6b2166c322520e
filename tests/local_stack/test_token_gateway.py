"""rllm-model-gateway in front of the stand-in model: per-session traces with token ids and logprobs."""

from __future__ import annotations

import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import openai
import pytest

from local_stack._process import ManagedProcess
from local_stack.gateway import session_base_url
from local_stack.hosting import DEFAULT_MODEL_NAME
from local_stack.model_endpoint.tokenizer import EOS_ID
from local_stack.problems import generate_problems
from trainer_client._traces import CALLS_IN_FLIGHT_HEADER

pytestmark = pytest.mark.processes

PROBLEM = generate_problems(2, seed=5)[1]


def _settled_traces(gateway: ManagedProcess, session_id: str) -> list[dict[str, Any]]:
    """The session's traces in one exact read: the gateway answers once its calls and trace writes are done."""
    response = httpx.get(f"{gateway.url}/sessions/{session_id}/traces/settled", params={"timeout_s": 30}, timeout=60)
    response.raise_for_status()
    assert response.headers[CALLS_IN_FLIGHT_HEADER] == "0"
    return response.json()


def _traced_calls(gateway: ManagedProcess) -> int:
    return sum(s["trace_count"] for s in httpx.get(f"{gateway.url}/sessions", timeout=5).json())


def test_a_strands_agent_streaming_through_the_session_url_is_traced_with_tokens(gateway: ManagedProcess) -> None:
    # GIVEN a Strands agent with a calculator tool whose model URL is a gateway session URL
    from strands import Agent, tool
    from strands.models.openai import OpenAIModel

    @tool
    def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression of integers."""
        assert re.fullmatch(r"[\d\s+\-*/]+", expression)
        return str(eval(expression, {"__builtins__": {}}))

    session_id = str(uuid.uuid4())
    model = OpenAIModel(
        client_args={"base_url": session_base_url(gateway.url, session_id), "api_key": "unused"},
        model_id=DEFAULT_MODEL_NAME,
        params={"temperature": 0.0},
    )
    agent = Agent(model=model, tools=[calculator], callback_handler=None)
    # WHEN it solves a problem (Strands streams every call)
    agent(PROBLEM["prompt"])
    # THEN the gateway holds both calls for the session, each with prompt ids, completion ids and logprobs
    traces = _settled_traces(gateway, session_id)
    assert [t["finish_reason"] for t in traces] == ["tool_calls", "stop"]
    for trace in traces:
        assert trace["session_id"] == session_id
        assert trace["prompt_token_ids"]
        assert trace["completion_token_ids"][-1] == EOS_ID
        assert len(trace["logprobs"]) == len(trace["completion_token_ids"])
    assert traces[1]["response_message"]["content"].endswith(f"#### {PROBLEM['answer']}")


def test_non_streaming_calls_are_traced_and_the_agent_sees_no_token_fields(gateway: ManagedProcess) -> None:
    # GIVEN an OpenAI client on a session URL
    session_id = str(uuid.uuid4())
    with openai.OpenAI(base_url=session_base_url(gateway.url, session_id), api_key="unused") as client:
        # WHEN it makes one plain call
        raw = client.chat.completions.create(
            model=DEFAULT_MODEL_NAME, messages=[{"role": "user", "content": PROBLEM["prompt"]}]
        ).model_dump()
    # THEN its response is a clean OpenAI one, and the trace has the tokens
    assert "prompt_token_ids" not in raw and "token_ids" not in raw["choices"][0]
    assert raw["choices"][0]["logprobs"] is None
    (trace,) = _settled_traces(gateway, session_id)
    assert trace["prompt_token_ids"] and trace["completion_token_ids"]
    assert len(trace["logprobs"]) == len(trace["completion_token_ids"])


def test_a_settled_read_made_while_a_streamed_call_is_in_flight_includes_that_calls_trace(
    gateway: ManagedProcess,
) -> None:
    # GIVEN a streamed call through a session URL whose first chunk has arrived (so the gateway holds the call)
    session_id = str(uuid.uuid4())
    request = {
        "model": DEFAULT_MODEL_NAME,
        "messages": [{"role": "user", "content": PROBLEM["prompt"]}],
        "stream": True,
    }
    url = f"{session_base_url(gateway.url, session_id)}/chat/completions"
    with httpx.stream("POST", url, json=request, timeout=30) as stream:
        lines = stream.iter_lines()
        assert next(line for line in lines if line.startswith("data: "))
        # WHEN the trainer reads the session's settled traces before the stream is consumed
        with ThreadPoolExecutor(1) as pool:
            read = pool.submit(_settled_traces, gateway, session_id)
            rest = [line for line in lines if line.startswith("data: ")]
            traces = read.result(timeout=60)
    # THEN the read waited for the call and its write: the one trace is there, with every streamed token
    assert rest[-1] == "data: [DONE]"
    (trace,) = traces
    assert trace["completion_token_ids"][-1] == EOS_ID
    assert len(trace["logprobs"]) == len(trace["completion_token_ids"])


def test_calls_without_the_session_prefix_are_not_traced(gateway: ManagedProcess) -> None:
    # GIVEN a client on the gateway's bare /v1
    before = _traced_calls(gateway)
    with openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused") as client:
        # WHEN it makes a call
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": PROBLEM["prompt"]}])
    # THEN the call went through but no session recorded it
    time.sleep(0.2)
    assert _traced_calls(gateway) == before


def test_session_urls_reject_ids_with_a_slash() -> None:
    # GIVEN a session id the gateway's URL cannot carry
    # WHEN a session URL is built THEN it is refused with the reason
    with pytest.raises(ValueError, match="contains '/'"):
        session_base_url("http://127.0.0.1:1", "a/b")
