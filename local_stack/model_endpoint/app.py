"""The OpenAI-compatible HTTP surface of the local model, with vLLM's token fields.

Routes: ``POST /v1/chat/completions`` (streaming over SSE or not, tool calls), ``GET /v1/models`` and
``GET /health``, plus the routes of the policy behind them (a
:class:`~local_stack.model_endpoint.chat.ChatPolicy`; the default is the stand-in, :mod:`local_stack.tiny_policy`
serves a real transformer through the same surface). As in
vLLM, ``return_token_ids: true`` adds ``prompt_token_ids`` at the root (in the first chunk when
streaming) and ``token_ids`` per choice (per chunk when streaming, end-of-sequence included), and
``logprobs: true`` adds ``choices[].logprobs.content[]`` with one entry per token. Unknown request
fields are ignored (the stand-in ignores ``max_tokens`` and ``top_p`` too: answers are short), and any
``model`` name is answered (and echoed). A policy may add root fields to every response (the transformer
policy adds ``weight_version``). With ``moe`` (``--moe``) the stand-in is a tiny mixture of experts
(:mod:`local_stack.model_endpoint.moe`) and returns each choice's ``routed_experts`` as vLLM does with
``--enable-return-routed-experts`` (on the last chunk when streaming).

Repeatability: each request draws from ``Random(hash(seed, messages, k))``, where ``k`` is the request's
``seed`` if it sends one, else how many times this server has already seen the same messages. The same
requests in the same order give the same answers; samples of one prompt differ from each other.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import json
import random
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from local_stack.hosting import DEFAULT_MODEL_NAME
from local_stack.model_endpoint.chat import ChatPolicy, ChatRequest, Completion, InvalidRequestError, error_response
from local_stack.model_endpoint.moe import routed_experts
from local_stack.model_endpoint.policy import Sampled, Sampler, StandInPolicy, Turn
from local_stack.model_endpoint.script import Script
from local_stack.model_endpoint.tokenizer import Tokenizer
from rollout_contract.settings import PathValue, Settings

__all__ = [
    "DEFAULT_MODEL_NAME",
    "POLICIES",
    "STAND_IN",
    "TRANSFORMER",
    "EndpointSettings",
    "create_app",
]

STAND_IN = "stand-in"
TRANSFORMER = "transformer"
POLICIES = (STAND_IN, TRANSFORMER)
_SEEN_LIMIT = 100_000


class EndpointSettings(Settings):
    """How the stand-in model behaves.

    Attributes:
        model_name: the name ``/v1/models`` lists.
        seed: base seed of every random choice.
        latency_s: simulated time per call, before the first byte (benchmarks use it to size rollouts).
        policy: ``"stand-in"`` (the scripted math policy) or ``"transformer"`` (the tiny PyTorch policy of
            :mod:`local_stack.tiny_policy`, initialized from ``seed``; needs ``make ml-env``).
        script: a file of scripted answers the stand-in gives before its own rules
            (:mod:`local_stack.model_endpoint.script`); checked when the settings are made.
        moe: return each choice's per-token MoE routing (``routed_experts``), as vLLM does when started with
            ``--enable-return-routed-experts``.
        tinker: also serve the Tinker API on the transformer policy
            (:mod:`local_stack.tiny_policy.tinker_api`; needs the ``tinker`` SDK, ``make ml-env``).
    """

    model_name: str = DEFAULT_MODEL_NAME
    seed: int = 0
    latency_s: float = Field(default=0.0, ge=0)
    policy: str = STAND_IN
    script: PathValue | None = None
    moe: bool = False
    tinker: bool = False

    @field_validator("policy")
    @classmethod
    def _policy(cls, policy: str) -> str:
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}; use one of {', '.join(POLICIES)}")
        if policy == TRANSFORMER and importlib.util.find_spec("torch") is None:
            raise ValueError(
                "the transformer policy needs PyTorch, which lives in the ML environment: run `make ml-env`, "
                "then use .venv-ml/bin/rollouts (or .venv-ml/bin/python)"
            )
        return policy

    @field_validator("script")
    @classmethod
    def _script(cls, script: Path | None) -> Path | None:
        if script is None:
            return None
        script = script.resolve()
        Script.load(script)
        return script

    @model_validator(mode="after")
    def _scripted_policy(self) -> EndpointSettings:
        if self.script is not None and self.policy != STAND_IN:
            raise ValueError(f"a model script is answered by the stand-in policy, not by {self.policy!r}")
        if self.moe and self.policy != STAND_IN:
            raise ValueError(f"the mixture-of-experts variant is the stand-in's; {self.policy!r} has no experts")
        if self.tinker and self.policy != TRANSFORMER:
            raise ValueError(
                f"the Tinker API trains the transformer policy; use policy {TRANSFORMER!r}, not {self.policy!r}"
            )
        if self.tinker and importlib.util.find_spec("tinker") is None:
            raise ValueError(
                "the Tinker API needs the tinker SDK, which lives in the ML environment: run `make ml-env`"
            )
        return self


class _StandIn:
    """The stand-in policy, the tokenizer and the per-conversation counters behind the routes."""

    def __init__(self, settings: EndpointSettings) -> None:
        self.settings = settings
        self.tokenizer = Tokenizer()
        self.policy = StandInPolicy(self.tokenizer)
        self.script = Script.load(settings.script) if settings.script is not None else None
        self._seen: OrderedDict[str, int] = OrderedDict()

    def rng(self, request: ChatRequest) -> random.Random:
        conversation = hashlib.sha256(json.dumps(request.messages, sort_keys=True).encode()).hexdigest()
        if request.seed is not None:
            draw = request.seed
        else:
            draw = self._seen.pop(conversation, 0)
            self._seen[conversation] = draw + 1
            if len(self._seen) > _SEEN_LIMIT:
                self._seen.popitem(last=False)
        material = f"{self.settings.seed}:{conversation}:{draw}".encode()
        return random.Random(int.from_bytes(hashlib.sha256(material).digest()[:8], "big"))

    async def complete(self, request: ChatRequest) -> Completion:
        rng = self.rng(request)
        turn = self._scripted(request, rng) or self.policy.respond(
            request.messages,
            tools=request.tools,
            tool_choice=request.tool_choice,
            temperature=request.temperature,
            rng=rng,
        )
        return Completion(self.tokenizer.chat_prompt_ids(request.messages, request.tools), turn)

    def _scripted(self, request: ChatRequest, rng: random.Random) -> Turn | None:
        """The script's turn for ``request`` as tokens, or ``None`` when there is no script or no match."""
        if self.script is None:
            return None
        scripted = self.script.next_turn(request.messages, temperature=request.temperature, rng=rng)
        if scripted is None:
            return None
        sampler = Sampler(self.tokenizer, request.temperature, rng)
        if scripted.tool is not None:
            return sampler.tool_turn(scripted.tool, scripted.arguments)
        return sampler.text_turn([scripted.content or ""])

    def routes(self) -> Sequence[Route]:
        return ()


def _logprob_entry(sampled: Sampled, top_logprobs: int) -> dict[str, Any]:
    text = sampled.token.text
    entry = {"token": text, "logprob": sampled.logprob, "bytes": list(text.encode())}
    top = [dict(entry)] if top_logprobs else []
    return {**entry, "top_logprobs": top}


def _choice_extras(request: ChatRequest, tokens: list[Sampled]) -> dict[str, Any]:
    extras: dict[str, Any] = {}
    if request.logprobs:
        extras["logprobs"] = {"content": [_logprob_entry(s, request.top_logprobs) for s in tokens]}
    else:
        extras["logprobs"] = None
    if request.return_token_ids:
        extras["token_ids"] = [s.token.id for s in tokens]
    return extras


def _usage(prompt_ids: list[int], turn: Turn) -> dict[str, int]:
    completion = len(turn.tokens)
    return {
        "prompt_tokens": len(prompt_ids),
        "completion_tokens": completion,
        "total_tokens": len(prompt_ids) + completion,
    }


def _routing(completion: Completion) -> dict[str, Any]:
    """The choice's ``routed_experts``: every token fed through the model, prompt first."""
    return {"routed_experts": routed_experts([*completion.prompt_ids, *(s.token.id for s in completion.turn.tokens)])}


def _completion_body(
    request: ChatRequest, completion: Completion, ids: tuple[str, int], *, moe: bool = False
) -> dict[str, Any]:
    prompt_ids, turn = completion.prompt_ids, completion.turn
    message: dict[str, Any] = {"role": "assistant", "content": turn.content}
    if turn.tool_call is not None:
        call = turn.tool_call
        message["tool_calls"] = [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
        ]
    body: dict[str, Any] = {
        "id": ids[0],
        "object": "chat.completion",
        "created": ids[1],
        "model": request.model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": turn.finish_reason,
                **_choice_extras(request, turn.tokens),
                **(_routing(completion) if moe else {}),
            }
        ],
        "usage": _usage(prompt_ids, turn),
        **completion.extra,
    }
    if request.return_token_ids:
        body["prompt_token_ids"] = prompt_ids
    return body


def _stream_chunks(
    request: ChatRequest, completion: Completion, ids: tuple[str, int], *, moe: bool = False
) -> list[dict[str, Any]]:
    """The chunks vLLM would stream: the role first, then one chunk per token (tool calls per part)."""
    prompt_ids, turn = completion.prompt_ids, completion.turn

    def chunk(delta: dict[str, Any], tokens: list[Sampled], finish_reason: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason, **_choice_extras(request, tokens)}
        return {
            "id": ids[0],
            "object": "chat.completion.chunk",
            "created": ids[1],
            "model": request.model,
            "choices": [choice],
            **completion.extra,
        }

    first = chunk({"role": "assistant", "content": ""}, [])
    if request.return_token_ids:
        first["prompt_token_ids"] = prompt_ids
    chunks = [first]
    call = turn.tool_call
    for part in turn.parts:
        if part.kind == "text":
            chunks += [chunk({"content": s.token.text}, [s]) for s in part.tokens]
        elif part.kind == "tool_name" and call is not None:
            opening = {"index": 0, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}
            chunks.append(chunk({"tool_calls": [opening]}, part.tokens))
        elif part.kind == "tool_arguments":
            chunks.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": part.text}}]}, part.tokens))
        elif part.kind == "end":
            chunks.append(chunk({}, part.tokens, turn.finish_reason))
            if moe:
                chunks[-1]["choices"][0].update(_routing(completion))
    if request.include_usage:
        chunks.append(
            {
                "id": ids[0],
                "object": "chat.completion.chunk",
                "created": ids[1],
                "model": request.model,
                "choices": [],
                "usage": _usage(prompt_ids, turn),
            }
        )
    return chunks


def create_app(settings: EndpointSettings | None = None, policy: ChatPolicy | None = None) -> Starlette:
    """Build the model endpoint's Starlette app around ``policy`` (default: the stand-in)."""
    settings = settings or EndpointSettings()
    extra_routes: list[Route] = []
    if policy is None and settings.policy == TRANSFORMER:
        from local_stack.tiny_policy.server import TransformerPolicy

        transformer = TransformerPolicy(seed=settings.seed)
        if settings.tinker:
            from local_stack.tiny_policy.tinker_api import TinkerService

            extra_routes += TinkerService(transformer, settings.model_name).routes()
        policy = transformer
    policy = policy or _StandIn(settings)

    async def health(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def models(_: Request) -> Response:
        card = {"id": settings.model_name, "object": "model", "created": 0, "owned_by": "local-stack"}
        return JSONResponse({"object": "list", "data": [card]})

    async def chat_completions(request: Request) -> Response:
        try:
            body = json.loads(await request.body())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return error_response(400, f"the request body is not valid JSON: {exc}")
        try:
            chat = ChatRequest.parse(body, settings.model_name)
        except InvalidRequestError as exc:
            return error_response(400, str(exc), param=exc.param)
        try:
            completion = await policy.complete(chat)
        except InvalidRequestError as exc:
            return error_response(400, str(exc), param=exc.param)
        ids = (f"chatcmpl-{uuid.uuid4().hex}", int(time.time()))
        if settings.latency_s:
            await asyncio.sleep(settings.latency_s)
        if not chat.stream:
            return JSONResponse(_completion_body(chat, completion, ids, moe=settings.moe))
        chunks = _stream_chunks(chat, completion, ids, moe=settings.moe)

        async def events() -> AsyncIterator[str]:
            for item in chunks:
                yield f"data: {json.dumps(item)}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(
        routes=[
            Route("/health", health, methods=["GET"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            *policy.routes(),
            *extra_routes,
        ]
    )
