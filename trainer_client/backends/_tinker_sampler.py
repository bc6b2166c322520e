"""The Tinker sampler behind an OpenAI chat surface: what the experiment's token gateway sends agents' calls to.

Tinker samples token ids, not chats. :class:`TinkerSampler` is a small OpenAI-compatible server in the trainer's
process: each ``POST /v1/chat/completions`` is rendered to prompt ids by a :class:`ChatRenderer`, sampled by the
current :class:`tinker.SamplingClient` (swapped at every weight sync, :meth:`TinkerSampler.use`), and answered with
the fields the token gateway records, as vLLM returns them: ``prompt_token_ids``, each choice's ``token_ids`` and
``logprobs``, and ``weight_version`` (the optimizer steps behind the sampler's weights). Not streamed.

Renderers: :class:`HfChatRenderer` (the model's Hugging Face chat template; tool calls in the Hermes form
``<tool_call>{"name": ..., "arguments": ...}</tool_call>``, Qwen's) or any class named ``module:Class`` whose
instances have the same three methods (the tiny policy's: ``local_stack.tiny_policy.tinker_renderer:TinyRenderer``).
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

__all__ = ["ChatRenderer", "HfChatRenderer", "TinkerSampler"]

_TOOL_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)


class ChatRenderer(Protocol):
    """Chat to token ids and back, for one model."""

    def prompt_ids(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]) -> list[int]:
        """The prompt of a chat request, generation prompt included."""
        ...

    def stop_ids(self, tools: Sequence[Mapping[str, Any]]) -> list[int]:
        """The ids that end a turn."""
        ...

    def message(
        self, token_ids: Sequence[int], stopped: bool, request: Mapping[str, Any]
    ) -> tuple[dict[str, Any], str]:
        """The assistant message of sampled ids, and its ``finish_reason``."""
        ...


class HfChatRenderer:
    """A Hugging Face tokenizer's chat template; tool calls in the Hermes ``<tool_call>`` JSON form."""

    def __init__(
        self, tokenizer: str, chat_template_kwargs: Mapping[str, Any] | None = None, *, revision: str | None = None
    ) -> None:
        from transformers import AutoTokenizer

        self._tokenizer = AutoTokenizer.from_pretrained(tokenizer, revision=revision)
        self._kwargs = dict(chat_template_kwargs or {})

    def prompt_ids(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]) -> list[int]:
        ids = self._tokenizer.apply_chat_template(
            list(messages), tools=list(tools) or None, add_generation_prompt=True, tokenize=True, **self._kwargs
        )
        return list(ids["input_ids"] if isinstance(ids, Mapping) else ids)

    def stop_ids(self, tools: Sequence[Mapping[str, Any]]) -> list[int]:
        eos = self._tokenizer.eos_token_id
        return [eos] if isinstance(eos, int) else list(eos or [])

    def message(
        self, token_ids: Sequence[int], stopped: bool, request: Mapping[str, Any]
    ) -> tuple[dict[str, Any], str]:
        text = self._tokenizer.decode(list(token_ids), skip_special_tokens=True)
        calls = []
        for match in _TOOL_CALL.finditer(text):
            try:
                call = json.loads(match.group(1))
            except json.JSONDecodeError:
                continue
            arguments = call.get("arguments", {})
            calls.append(
                {
                    "id": f"call_{uuid.uuid4().hex[:24]}",
                    "type": "function",
                    "function": {
                        "name": str(call.get("name", "")),
                        "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                    },
                }
            )
        message: dict[str, Any] = {"role": "assistant", "content": _TOOL_CALL.sub("", text).strip() if calls else text}
        if calls:
            message["tool_calls"] = calls
            return message, "tool_calls"
        return message, "stop" if stopped else "length"


class TinkerSampler:
    """An OpenAI chat server on ``host``:``port`` (0: any free port) that samples with a Tinker sampling client."""

    def __init__(
        self,
        renderer: ChatRenderer,
        *,
        model_name: str,
        max_tokens: int,
        max_context: int | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.renderer = renderer
        self.model_name = model_name
        self.max_tokens = max_tokens
        self.max_context = max_context
        self._sampling_client: Any = None
        self.weight_version = 0
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))
        address = "127.0.0.1" if host == "0.0.0.0" else host
        #: The OpenAI base URL (``http://host:port/v1``) to give the gateway.
        self.url = f"http://{address}:{self._socket.getsockname()[1]}/v1"
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def use(self, sampling_client: Any, weight_version: int) -> None:
        """Sample with ``sampling_client`` from now on; its weights are ``weight_version``."""
        self._sampling_client, self.weight_version = sampling_client, weight_version

    def start(self) -> TinkerSampler:
        """Serve in a background thread; return self once it accepts connections."""
        import uvicorn
        from starlette.applications import Starlette
        from starlette.routing import Route

        app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/health", self._health, methods=["GET"]),
            ]
        )
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, timeout_keep_alive=75))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"the Tinker sampler did not start on {self.url}")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        """Stop serving."""
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)
        self._socket.close()

    def __enter__(self) -> TinkerSampler:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    async def _health(self, _: Any) -> Any:
        from starlette.responses import JSONResponse

        return JSONResponse({"status": "ok", "weight_version": self.weight_version})

    async def _models(self, _: Any) -> Any:
        from starlette.responses import JSONResponse

        card = {"id": self.model_name, "object": "model", "created": 0, "owned_by": "tinker"}
        return JSONResponse({"object": "list", "data": [card]})

    async def _chat(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        try:
            body = json.loads(await request.body())
            if body.get("stream"):
                raise ValueError("stream is not supported by the Tinker sampler: send stream=false")
            if int(body.get("n") or 1) != 1:
                raise ValueError("n must be 1: the gateway records one choice per call")
            if self._sampling_client is None:
                raise ValueError("no weights to sample yet: the trainer has not synced the sampler")
            tools = body.get("tools") or []
            prompt = await asyncio.to_thread(self.renderer.prompt_ids, body.get("messages") or [], tools)
            if self.max_context is not None and len(prompt) >= self.max_context:
                raise ValueError(
                    f"the prompt has {len(prompt)} tokens; max_context_tokens is {self.max_context}: shorten the "
                    "conversation or raise max_context_tokens"
                )
        except (ValueError, TypeError, KeyError) as exc:
            return JSONResponse({"error": {"message": str(exc), "type": "invalid_request_error"}}, status_code=400)
        return JSONResponse(await self._sample(body, tools, prompt))

    async def _sample(
        self, body: Mapping[str, Any], tools: Sequence[Mapping[str, Any]], prompt: list[int]
    ) -> dict[str, Any]:
        import tinker

        client, version = self._sampling_client, self.weight_version
        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or self.max_tokens)
        if self.max_context is not None:
            max_tokens = min(max_tokens, self.max_context - len(prompt))
        params = tinker.SamplingParams(
            max_tokens=max_tokens,
            temperature=float(body.get("temperature", 1.0)),
            top_p=float(body.get("top_p", 1.0)),
            seed=body.get("seed"),
            stop=self.renderer.stop_ids(tools),
        )
        result = await client.sample(prompt=tinker.ModelInput.from_ints(prompt), num_samples=1, sampling_params=params)
        sequence = result.sequences[0]
        tokens, logprobs = list(sequence.tokens), list(sequence.logprobs or [])
        message, finish_reason = self.renderer.message(tokens, sequence.stop_reason == "stop", body)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", self.model_name),
            "prompt_token_ids": prompt,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": finish_reason,
                    "token_ids": tokens,
                    "logprobs": {
                        "content": [
                            {"token": f"token_id:{token}", "logprob": logprob, "bytes": None, "top_logprobs": []}
                            for token, logprob in zip(tokens, logprobs, strict=True)
                        ]
                    },
                }
            ],
            "usage": {
                "prompt_tokens": len(prompt),
                "completion_tokens": len(tokens),
                "total_tokens": len(prompt) + len(tokens),
            },
            "weight_version": version,
        }
