"""A scripted OpenAI-compatible chat endpoint for the math agent tests, served on 127.0.0.1:<os port>.

Turn 1 asks the calculator for the problem's expression (recovered with ``parse_problem``); turn 2
answers with the tool's result as ``#### N``. Streams like the OpenAI API, since Strands streams.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from local_stack.problems import parse_problem


class FakeModel:
    """The scripted endpoint; :attr:`requests` records each request body and authorization header."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> FakeModel:
        app = Starlette(routes=[Route("/v1/chat/completions", self._complete, methods=["POST"])])
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error"))
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("fake model server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.should_exit = True
        self._thread.join(10)

    @property
    def base_url(self) -> str:
        port = self._server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1"

    async def _complete(self, request: Request) -> StreamingResponse:
        body = await request.json()
        self.requests.append({"body": body, "authorization": request.headers.get("authorization")})
        tool_results = [m for m in body["messages"] if m["role"] == "tool"]
        if tool_results:
            value = _text(tool_results[-1]["content"])
            deltas = [{"content": f"The calculator says {value}.\n#### {value}"}]
            finish = "stop"
        else:
            user = [m for m in body["messages"] if m["role"] == "user"][-1]
            problem = parse_problem(_text(user["content"]))
            arguments = json.dumps({"expression": problem.expression if problem else "0"})
            deltas = [
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "calculator", "arguments": arguments},
                        }
                    ]
                }
            ]
            finish = "tool_calls"
        return StreamingResponse(_stream(body["model"], deltas, finish), media_type="text/event-stream")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))


def _stream(model: str, deltas: list[dict[str, Any]], finish: str) -> Iterator[str]:
    def chunk(choices: list[dict[str, Any]], **extra: Any) -> str:
        data = {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": choices,
            **extra,
        }
        return f"data: {json.dumps(data)}\n\n"

    yield chunk([{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}])
    for delta in deltas:
        yield chunk([{"index": 0, "delta": delta, "finish_reason": None}])
    yield chunk([{"index": 0, "delta": {}, "finish_reason": finish}])
    yield chunk([], usage={"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15})
    yield "data: [DONE]\n\n"
