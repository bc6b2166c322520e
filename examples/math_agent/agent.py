"""The math agent shared by both forms: a Strands agent with a calculator tool on an OpenAI-compatible model."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from strands import Agent, tool
from strands.models.openai import OpenAIModel

from agent_app import openai_sampling_kwargs
from examples.math_agent.calculator import CalculatorError, evaluate, format_number

__all__ = ["SYSTEM_PROMPT", "build_agent", "build_model", "calculator", "solve"]

SYSTEM_PROMPT = (
    "You solve grade-school math word problems. Think step by step, and use the calculator tool for "
    "every arithmetic operation instead of computing in your head. End your reply with the final answer "
    "on its own line in the form '#### <number>' (digits only, no units)."
)


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression such as '12 * (3 + 4) / 2'.

    Args:
        expression: numbers with + - * / // % ** and parentheses.
    """
    try:
        return format_number(evaluate(expression))
    except CalculatorError as exc:
        return f"error: {exc}"


def build_model(
    *, base_url: str, model_id: str, api_key: str = "EMPTY", sampling_params: Mapping[str, Any] | None = None
) -> OpenAIModel:
    """Return a Strands model for an OpenAI-compatible endpoint (vLLM, SGLang, a token gateway, ...).

    ``sampling_params`` are a trainer's (``_rollout.sampling_params``): OpenAI's go to the client as
    keywords, server-specific ones (``top_k``, ``repetition_penalty``, ...) in the request body
    (:func:`agent_app.openai_sampling_kwargs`).
    """
    return OpenAIModel(
        client_args={"base_url": base_url, "api_key": api_key},
        model_id=model_id,
        params=openai_sampling_kwargs(sampling_params),
    )


def build_agent(model: OpenAIModel) -> Agent:
    """Return a fresh agent (one per request: the conversation is the agent's state)."""
    return Agent(model=model, tools=[calculator], system_prompt=SYSTEM_PROMPT, callback_handler=None)


async def solve(model: OpenAIModel, prompt: str) -> str:
    """Run the agent on one problem and return its final text."""
    result = await build_agent(model).invoke_async(prompt)
    return str(result).strip()
