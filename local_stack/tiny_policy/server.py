"""The transformer policy behind the model endpoint's OpenAI surface, with a weight-loading endpoint.

:class:`TransformerPolicy` is a :class:`~local_stack.model_endpoint.chat.ChatPolicy`: the endpoint's routes,
validation, streaming and vLLM token fields are the stand-in's; this class samples the turn from
the network and adds ``weight_version`` to every response (and every streamed chunk).

Batching: requests wait in a queue; one worker thread takes every request waiting (up to
:data:`MAX_BATCH`) and samples them together (:func:`~local_stack.tiny_policy.model.sample_batch`, one
forward pass per token position for the whole batch), as vLLM batches concurrent requests.

Sampling parameters: ``temperature`` (0 is greedy), ``top_p``, ``max_tokens`` (default
:data:`DEFAULT_MAX_TOKENS`), ``seed`` (the request's draws come from ``torch.Generator().manual_seed(seed)``;
without it, from the server's generator, seeded once with the endpoint's seed).

Weights: ``GET /v1/weights`` returns ``{"weight_version", "config"}`` (the config builds the same network,
:class:`~local_stack.tiny_policy.model.PolicyConfig`); ``POST /v1/weights`` loads a ``state_dict`` saved with
``torch.save``, either from a file (JSON ``{"path": "...", "version": N}``) or as the request body
(``Content-Type: application/octet-stream``, ``?version=N``). ``version`` defaults to the current one
plus 1. A load waits for the running batch and the next batch waits for the load, so a response's
logprobs and its ``weight_version`` always belong together.
"""

from __future__ import annotations

import asyncio
import io
import json
import queue
import threading
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from local_stack.model_endpoint.chat import ChatRequest, Completion, InvalidRequestError, error_response
from local_stack.model_endpoint.policy import Part, Sampled, ToolCall, Turn
from local_stack.model_endpoint.tokenizer import Token
from local_stack.tiny_policy.chat_template import ChatTokenizer, VocabularyError, tool_names
from local_stack.tiny_policy.model import (
    PolicyConfig,
    SampledTokens,
    SamplingRequest,
    build_model,
    require_torch,
    sample_batch,
)

__all__ = ["DEFAULT_MAX_TOKENS", "MAX_BATCH", "TransformerPolicy", "called_tool"]

DEFAULT_MAX_TOKENS = 16
#: Requests sampled together at most.
MAX_BATCH = 64


class TransformerPolicy:
    """The tiny causal transformer as a chat policy; see the module docstring."""

    def __init__(self, config: PolicyConfig | None = None, *, seed: int = 0, weights: Path | None = None) -> None:
        self._torch = require_torch()
        self._torch.set_num_threads(1)
        self.config = config or PolicyConfig(seed=seed)
        self.tokenizer = ChatTokenizer()
        self.model = build_model(self.config)
        self.weight_version = 0
        self._lock = threading.Lock()
        self._generator = self._torch.Generator().manual_seed(seed)
        self._pending: queue.SimpleQueue[tuple[SamplingRequest, Future[tuple[SampledTokens, int]]]] = (
            queue.SimpleQueue()
        )
        if weights is not None:
            self.load_weights(weights.read_bytes(), version=0)
        threading.Thread(target=self._serve_batches, name="tiny-policy-batches", daemon=True).start()

    async def complete(self, request: ChatRequest) -> Completion:
        """Queue the request for the next batch and wait for its turn (the event loop stays free)."""
        tool = called_tool(request.tools, request.tool_choice)
        try:
            prompt_ids = self.tokenizer.render_prompt(request.messages, request.tools)
        except VocabularyError as exc:
            raise InvalidRequestError(str(exc), "messages") from exc
        if len(prompt_ids) >= self.config.max_seq_len:
            raise InvalidRequestError(
                f"the prompt has {len(prompt_ids)} tokens; this model reads at most {self.config.max_seq_len - 1}",
                "messages",
            )
        sampling = SamplingRequest(
            prompt_ids=prompt_ids,
            max_tokens=request.max_tokens or DEFAULT_MAX_TOKENS,
            stop_ids=self.tokenizer.stop_ids if tool else frozenset({self.tokenizer.im_end_id}),
            temperature=request.temperature,
            top_p=request.top_p,
            generator=(
                self._torch.Generator().manual_seed(request.seed) if request.seed is not None else self._generator
            ),
        )
        done: Future[tuple[SampledTokens, int]] = Future()
        self._pending.put((sampling, done))
        sampled, version = await asyncio.wrap_future(done)
        return Completion(prompt_ids, self._turn(sampled, tool), {"weight_version": version})

    def _serve_batches(self) -> None:
        """The worker thread: take every waiting request, sample them together, answer each."""
        while True:
            batch = [self._pending.get()]
            while len(batch) < MAX_BATCH:
                try:
                    batch.append(self._pending.get_nowait())
                except queue.Empty:
                    break
            try:
                with self._lock:
                    results = sample_batch(self.model, [request for request, _ in batch])
                    version = self.weight_version
            except Exception as exc:  # every request of the batch gets the error
                for _, done in batch:
                    done.set_exception(exc)
                continue
            for (_, done), sampled in zip(batch, results, strict=True):
                done.set_result((sampled, version))

    def _turn(self, sampled: SampledTokens, tool: str | None) -> Turn:
        ids, stopped = sampled.token_ids, sampled.stopped
        tokens = [Sampled(Token(i, self.tokenizer.piece(i)), lp) for i, lp in zip(ids, sampled.logprobs, strict=True)]
        body, end = (tokens[:-1], tokens[-1:]) if stopped else (tokens, [])
        text = Part("text", "".join(s.token.text for s in body), body)
        if not (stopped and ids[-1] == self.tokenizer.tool_call_id):
            return Turn([text, Part("end", "", end)], None, "stop" if stopped else "length")
        call = ToolCall(f"call_{uuid.uuid4().hex[:24]}", tool or "", "{}")
        parts = [
            text,
            Part("tool_name", call.name, end),
            Part("tool_arguments", call.arguments, []),
            Part("end", "", []),
        ]
        return Turn(parts, call, "tool_calls")

    def load_weights(self, state: bytes, *, version: int | None = None) -> int:
        """Load a ``torch.save``'d state_dict (same config); return the new weight version."""
        loaded = self._torch.load(io.BytesIO(state), map_location="cpu", weights_only=True)
        with self._lock:
            self.model.load_state_dict(loaded, strict=True)
            self.weight_version = self.weight_version + 1 if version is None else version
            return self.weight_version

    def routes(self) -> Sequence[Route]:
        """``GET`` and ``POST /v1/weights``."""
        return [Route("/v1/weights", self._weights, methods=["GET", "POST"])]

    async def _weights(self, request: Request) -> Response:
        if request.method == "GET":
            return JSONResponse({"weight_version": self.weight_version, "config": self.config.to_dict()})
        try:
            state, version = await _weights_request(request)
            loaded = await run_in_threadpool(self.load_weights, state, version=version)
        except (OSError, ValueError, RuntimeError) as exc:
            return error_response(400, f"could not load the weights: {exc}", param="weights")
        return JSONResponse({"weight_version": loaded})


async def _weights_request(request: Request) -> tuple[bytes, int | None]:
    """The state_dict bytes and the version of a ``POST /v1/weights`` (a JSON path or the raw body)."""
    if request.headers.get("content-type", "").startswith("application/octet-stream"):
        version = request.query_params.get("version")
        return await request.body(), int(version) if version is not None else None
    try:
        body: Any = json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"send JSON {{'path': ..., 'version': N}} or an octet-stream body: {exc}") from exc
    if not isinstance(body, dict) or not isinstance(body.get("path"), str):
        raise ValueError("send JSON {'path': '/file/saved/with/torch.save', 'version': N}")
    version = body.get("version")
    if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
        raise ValueError("version must be an integer")
    return Path(body["path"]).read_bytes(), version


def called_tool(tools: Sequence[Mapping[str, Any]], choice: Any) -> str | None:
    """The tool a ``<tool_call>`` token calls in a request offering ``tools`` with ``tool_choice`` ``choice``, or
    None when the model may not call one."""
    names = tool_names(tools)
    if not names or choice == "none":
        return None
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        if not isinstance(name, str) or name not in names:
            raise InvalidRequestError(f"tool_choice names {name!r}, not one of the tools {names}", "tool_choice")
        return name
    if len(names) > 1:
        raise InvalidRequestError(
            f"this model calls one tool per request, and {len(names)} are offered: offer one, or name one in "
            "tool_choice",
            "tools",
        )
    return names[0]
