"""The chat completion request and answer shared by the model endpoint and the policies behind it.

:mod:`local_stack.model_endpoint.app` serves these over HTTP; a :class:`ChatPolicy` (the app's stand-in,
:class:`~local_stack.tiny_policy.server.TransformerPolicy`) answers them. The transformer policy imports this
module, not the app (the app loads the transformer policy when its settings ask for it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from local_stack.model_endpoint.policy import Turn

__all__ = ["DEFAULT_TEMPERATURE", "ChatPolicy", "ChatRequest", "Completion", "InvalidRequestError", "error_response"]

DEFAULT_TEMPERATURE = 1.0


class InvalidRequestError(ValueError):
    """A chat request the endpoint cannot serve; answered with HTTP 400 in OpenAI's error shape."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class ChatRequest:
    """The fields of a chat completion request the stand-in reads."""

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    tool_choice: Any
    temperature: float
    top_p: float
    max_tokens: int | None
    stream: bool
    include_usage: bool
    logprobs: bool
    top_logprobs: int
    return_token_ids: bool
    seed: int | None

    @classmethod
    def parse(cls, body: Any, default_model: str) -> ChatRequest:
        """Validate a request body.

        Raises:
            InvalidRequestError: a field is missing or has the wrong type (the message names it).
        """
        if not isinstance(body, dict):
            raise InvalidRequestError("the request body must be a JSON object")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise InvalidRequestError("messages must be a non-empty list of message objects", "messages")
        if any(not isinstance(m.get("role"), str) for m in messages):
            raise InvalidRequestError("every message needs a string 'role'", "messages")
        tools = body.get("tools") or []
        if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
            raise InvalidRequestError("tools must be a list of tool objects", "tools")
        temperature = body.get("temperature")
        temperature = DEFAULT_TEMPERATURE if temperature is None else temperature
        if isinstance(temperature, bool) or not isinstance(temperature, int | float) or not 0 <= temperature <= 2:
            raise InvalidRequestError("temperature must be a number from 0 to 2", "temperature")
        top_p = body.get("top_p")
        top_p = 1.0 if top_p is None else top_p
        if isinstance(top_p, bool) or not isinstance(top_p, int | float) or not 0 < top_p <= 1:
            raise InvalidRequestError("top_p must be a number above 0 and at most 1", "top_p")
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        if max_tokens is not None and (
            isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
        ):
            raise InvalidRequestError("max_tokens must be a positive integer", "max_tokens")
        n = body.get("n") or 1
        if n != 1:
            raise InvalidRequestError("this stand-in model returns one choice; send n=1 or leave n out", "n")
        seed = body.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise InvalidRequestError("seed must be an integer", "seed")
        top_logprobs = body.get("top_logprobs") or 0
        if isinstance(top_logprobs, bool) or not isinstance(top_logprobs, int) or top_logprobs < 0:
            raise InvalidRequestError("top_logprobs must be a non-negative integer", "top_logprobs")
        stream_options = body.get("stream_options") or {}
        return cls(
            model=str(body.get("model") or default_model),
            messages=messages,
            tools=tools,
            tool_choice=body.get("tool_choice", "auto"),
            temperature=float(temperature),
            top_p=float(top_p),
            max_tokens=max_tokens,
            stream=bool(body.get("stream", False)),
            include_usage=isinstance(stream_options, dict) and bool(stream_options.get("include_usage")),
            logprobs=bool(body.get("logprobs", False)),
            top_logprobs=top_logprobs,
            return_token_ids=bool(body.get("return_token_ids", False)),
            seed=seed,
        )


@dataclass(frozen=True)
class Completion:
    """A policy's answer to one chat request: the prompt ids it read, the turn, and extra root fields."""

    prompt_ids: list[int]
    turn: Turn
    extra: Mapping[str, Any] = field(default_factory=dict)


class ChatPolicy(Protocol):
    """What sits behind the HTTP surface: answers chat requests, may serve more routes."""

    async def complete(self, request: ChatRequest) -> Completion:
        """Answer one validated request (raise :class:`InvalidRequestError` for a request it cannot serve)."""
        ...

    def routes(self) -> Sequence[Route]:
        """More routes to serve next to the OpenAI ones."""
        ...


def error_response(
    status: int, message: str, *, param: str | None = None, kind: str = "invalid_request_error"
) -> Response:
    """An error in OpenAI's shape."""
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": None}}, status_code=status)
