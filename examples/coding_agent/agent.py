"""The coding agent: a multi-turn loop on an OpenAI-compatible model with one tool that runs Python.

Each turn sends the conversation and the ``run_python`` tool; a tool call runs its code in the session's
:class:`~examples.coding_agent.sandbox.Sandbox` and the output goes back as the tool's message; a text
answer ends the loop, and its last ```` ```python ```` block is the solution (the last code the tool ran,
if the answer holds none). No framework: the OpenAI SDK and a loop, so what the policy sees is plain.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam

from agent_app import openai_sampling_kwargs
from examples.coding_agent.sandbox import Sandbox

__all__ = ["RUN_PYTHON", "SYSTEM_PROMPT", "Attempt", "extract_code", "solve"]

SYSTEM_PROMPT = (
    "You write Python functions. You may call the run_python tool to run code and see its output (stdout, "
    "stderr, exit code) before you answer; it runs in a sandbox with a few seconds and a few hundred MB. When "
    "you are done, reply with the complete function in one ```python code block."
)
RUN_PYTHON: ChatCompletionToolParam = {
    "type": "function",
    "function": {
        "name": "run_python",
        "description": "Run a Python script in your working directory; returns its exit code, stdout and stderr.",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "the whole script"}},
            "required": ["code"],
        },
    },
}
_CODE_BLOCK = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)


@dataclass(frozen=True)
class Attempt:
    """What the agent produced: its solution, the turns it took, its tool calls and how it ended."""

    solution: str | None
    turns: int
    tool_calls: int
    finish: str  # "answered" or "max_turns"
    answer: str | None


def extract_code(text: str | None) -> str | None:
    """The last fenced code block of ``text``, or ``None``."""
    blocks = _CODE_BLOCK.findall(text or "")
    return blocks[-1] if blocks else None


async def solve(
    prompt: str,
    *,
    client: AsyncOpenAI,
    model_id: str,
    sandbox: Sandbox,
    sampling_params: Mapping[str, Any] | None = None,
    max_turns: int = 6,
) -> Attempt:
    """Work on ``prompt`` for at most ``max_turns`` model calls; return the attempt."""
    messages: list[ChatCompletionMessageParam] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": prompt},
    ]
    last_code: str | None = None
    tool_calls = 0
    for turn in range(1, max_turns + 1):
        response = await client.chat.completions.create(
            model=model_id, messages=messages, tools=[RUN_PYTHON], **openai_sampling_kwargs(sampling_params)
        )
        message = response.choices[0].message
        messages.append(message.model_dump(exclude_none=True, exclude_unset=True))
        if not message.tool_calls:
            return Attempt(extract_code(message.content) or last_code, turn, tool_calls, "answered", message.content)
        for call in message.tool_calls:
            tool_calls += 1
            if call.type != "function":
                messages.append({"role": "tool", "tool_call_id": call.id, "content": "error: only function calls"})
                continue
            output = await asyncio.to_thread(_run_tool, call.function.name, call.function.arguments, sandbox)
            if isinstance(output, tuple):
                last_code, output = output
            messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
    return Attempt(last_code, max_turns, tool_calls, "max_turns", None)


def _run_tool(name: str, arguments: str, sandbox: Sandbox) -> tuple[str, str] | str:
    """Run one tool call: ``(code, output)``, or an error text for the model when the call is malformed."""
    if name != "run_python":
        return f"error: there is no tool {name!r}; the only tool is run_python"
    try:
        code = json.loads(arguments or "{}").get("code")
    except (json.JSONDecodeError, AttributeError):
        return 'error: the arguments must be a JSON object {"code": "..."}'
    if not isinstance(code, str):
        return 'error: run_python takes {"code": "<the script>"}'
    return code, sandbox.run(code).summary()
