"""The stand-in's scripted answers (``--model-script``): drawn per conversation, continued turn by turn."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from local_stack.model_endpoint import EndpointSettings, create_app
from local_stack.model_endpoint.script import END_OF_SCRIPT, ScriptError

RUN = {"type": "function", "function": {"name": "run_python", "parameters": {"type": "object"}}}
SCRIPT = {
    "conversations": [
        {
            "match": "def add(a, b)",
            "answers": [
                [{"tool": "run_python", "arguments": {"code": "print(1)"}}, {"content": "first"}],
                [{"tool": "run_python", "arguments": {"code": "print(2)"}}, {"content": "second"}],
                [{"content": "third"}],
            ],
        }
    ]
}


@pytest.fixture
def model(tmp_path: Path) -> TestClient:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(SCRIPT))
    return TestClient(create_app(EndpointSettings(script=path)))


def _say(model: TestClient, messages: list[dict[str, Any]], temperature: float = 1.0) -> dict[str, Any]:
    body = {"model": "m", "messages": messages, "tools": [RUN], "temperature": temperature}
    return model.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]


def _conversation(model: TestClient, temperature: float = 1.0) -> list[str]:
    """Play a conversation to its end; return what the assistant said (tool calls by their code)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Write def add(a, b) please"}]
    said = []
    for _ in range(3):
        message = _say(model, messages, temperature)
        messages.append(message)
        if not message.get("tool_calls"):
            said.append(message["content"])
            return said
        call = message["tool_calls"][0]
        said.append(json.loads(call["function"]["arguments"])["code"])
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": "1"})
    return said


def test_each_conversation_follows_one_answer_to_its_end_and_samples_differ(model: TestClient) -> None:
    # WHEN the same prompt is answered eight times at temperature 1
    played = [tuple(_conversation(model)) for _ in range(8)]
    # THEN each conversation is one scripted answer, turn after turn, and more than one answer was drawn
    assert set(played) <= {("print(1)", "first"), ("print(2)", "second"), ("third",)}
    assert len(set(played)) > 1


def test_temperature_zero_takes_the_first_answer(model: TestClient) -> None:
    assert _conversation(model, temperature=0.0) == ["print(1)", "first"]


def test_a_conversation_that_left_the_script_is_told_so_and_others_get_the_stand_ins_own_answer(
    model: TestClient,
) -> None:
    off_script = [
        {"role": "user", "content": "def add(a, b)"},
        {"role": "assistant", "content": "something unscripted"},
        {"role": "tool", "content": "x", "tool_call_id": "c"},
    ]
    assert _say(model, off_script)["content"] == END_OF_SCRIPT
    assert "stand-in model" in _say(model, [{"role": "user", "content": "hello"}])["content"]


def test_a_script_that_is_not_one_is_refused_naming_the_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"conversations": [{"match": "x", "answers": [[{"content": "a", "tool": "t"}]]}]}))
    with pytest.raises(ScriptError, match="either"):
        EndpointSettings(script=path)
    with pytest.raises(ScriptError, match="cannot read"):
        EndpointSettings(script=tmp_path / "missing.json")
