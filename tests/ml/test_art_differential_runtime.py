"""Differential: ``agent_app.runtime`` and ``agent_app.logging`` against agentcore-rl-toolkit 0.2.0's own.

The same request sequences go to ART's ``AgentCoreRuntimeApp`` and to ours, and the answers are compared; each
package's ``AgentCoreHttpClient`` drives the other's app; ART's ``CorrelatedFormatter`` and ``configure_logging``
and ours format the same records and leave the root logger in the same state.
"""

from __future__ import annotations

import io
import json
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agentcore_rl_toolkit")

from agentcore_rl_toolkit import logging as art_logging  # noqa: E402
from agentcore_rl_toolkit.runtime import AgentCoreHttpClient as ArtHttpClient  # noqa: E402
from agentcore_rl_toolkit.runtime import AgentCoreRuntimeApp as ArtRuntimeApp  # noqa: E402
from agentcore_rl_toolkit.runtime import InvocationError as ArtInvocationError  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from agent_app import logging as our_logging  # noqa: E402
from agent_app._sdk import BedrockAgentCoreContext  # noqa: E402
from agent_app.runtime import AgentCoreHttpClient, AgentCoreRuntimeApp, InvocationError  # noqa: E402
from rollout_contract.protocol import SESSION_HEADER  # noqa: E402

SESSION = "s" * 40
ARN = "arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/agent-abc"
IMPLEMENTATIONS = {"art": ArtRuntimeApp, "ours": AgentCoreRuntimeApp}


def envelope(operation: str, invocation_id: str, **fields: Any) -> dict[str, Any]:
    return {"_agentcore_runtime": {"version": 1, "operation": operation, "invocation_id": invocation_id, **fields}}


class Scripted:
    """An app of one implementation whose handler echoes, fails, returns NaN, or waits for ``release``."""

    def __init__(self, app_class: type, state_dir: Path, **app_kwargs: Any) -> None:
        self.release = threading.Event()
        self.runs: list[dict[str, Any]] = []
        self.app = app_class(state_dir=state_dir, **app_kwargs)
        self.app.entrypoint(self.handle)
        self.http = TestClient(self.app).__enter__()

    def handle(self, payload: dict[str, Any]) -> Any:
        self.runs.append(payload)
        if payload.get("fail"):
            raise ValueError("tool crashed")
        if payload.get("nan"):
            return {"score": float("nan")}
        if payload.get("wait"):
            self.release.wait(10)
        return {"echo": payload}

    def post(self, body: dict[str, Any]) -> tuple[int, Any]:
        response = self.http.post("/invocations", json=body, headers={SESSION_HEADER: SESSION})
        return response.status_code, response.json()

    def close(self) -> None:
        self.release.set()
        self.http.__exit__(None, None, None)


@pytest.fixture
def scripted(tmp_path: Path) -> Iterator[Callable[..., Scripted]]:
    made: list[Scripted] = []

    def make(name: str, **app_kwargs: Any) -> Scripted:
        made.append(Scripted(IMPLEMENTATIONS[name], tmp_path / f"{name}-{len(made)}", **app_kwargs))
        return made[-1]

    yield make
    for app in made:
        app.close()


def _sequence(app: Scripted) -> list[tuple[int, Any]]:
    """One fixed conversation with an app; the answers, in order."""
    answers = [
        app.post({"q": 1}),
        app.post({"q": 2, **envelope("start", "a")}),
        app.post({"fail": True, **envelope("start", "b")}),
        app.post({"nan": True, **envelope("start", "c")}),
        app.post(envelope("get", "a")),
        app.post(envelope("get", "unknown")),
        app.post({"q": 3, **envelope("start", "a")}),  # a known id: answered from the record, not run again
        app.post({"wait": True, **envelope("start", "d", background=True)}),
        app.post(envelope("get", "d")),
        app.http.get("/ping").json()["status"],
    ]
    app.release.set()
    deadline = time.monotonic() + 10
    while (done := app.post(envelope("get", "d")))[1]["status"] != "completed":
        assert time.monotonic() < deadline
        time.sleep(0.02)
    return [*answers, done, len(app.runs)]


def test_art_and_ours_answer_the_same_conversation_alike(scripted):
    assert _sequence(scripted("ours")) == _sequence(scripted("art"))


@pytest.mark.parametrize(
    "bad",
    [
        {"version": 2, "operation": "get", "invocation_id": "a"},
        {"version": True, "operation": "get", "invocation_id": "a"},
        {"version": 1, "operation": "run", "invocation_id": "a"},
        {"version": 1, "operation": "get", "invocation_id": "-a"},
        {"version": 1, "operation": "get", "invocation_id": "a" * 129},
        {"version": 1, "operation": "get", "invocation_id": "a", "background": True},
        {"version": 1, "operation": "start", "invocation_id": "a", "background": "yes"},
        {"version": 1, "operation": "get", "invocation_id": "a", "extra": 1},
        "start",
    ],
)
def test_both_refuse_the_same_envelopes_with_400(scripted, bad):
    # the messages are each package's words; both name the problem
    ours, art = (scripted(name).post({"_agentcore_runtime": bad}) for name in ("ours", "art"))
    assert (ours[0], set(ours[1])) == (art[0], set(art[1])) == (400, {"error"})


def test_a_background_app_and_a_lost_start_are_answered_alike(scripted):
    answers = {}
    for name in ("ours", "art"):
        plain = scripted(name, background=True).post({"q": 1})
        lost = scripted(name)
        lost.app._store.start(SESSION, "lost")  # a start recorded by a process that is gone
        answers[name] = (plain[0], sorted(plain[1]), plain[1]["status"], len(plain[1]["invocation_id"]))
        answers[name] += (lost.post(envelope("get", "lost")),)
    assert answers["ours"] == answers["art"]
    assert answers["ours"][-1] == (200, {"version": 1, "invocation_id": "lost", "status": "interrupted"})


class _Seam:
    """ACR's data plane in front of one app: a boto3-shaped (``sync``) or aiobotocore-shaped client."""

    def __init__(self, app: Scripted) -> None:
        self.app = app

    def _post(self, kwargs: dict[str, Any]) -> tuple[int, bytes]:
        response = self.app.http.post(
            "/invocations", content=kwargs["payload"], headers={SESSION_HEADER: kwargs["runtimeSessionId"]}
        )
        return response.status_code, response.content

    def sync(self) -> Any:
        seam = self

        class Boto3Like:
            def invoke_agent_runtime(self, **kwargs: Any) -> dict[str, Any]:
                status, body = seam._post(kwargs)
                return {"statusCode": status, "response": io.BytesIO(body)}

        return Boto3Like()

    def asynchronous(self) -> Any:
        seam = self

        class Body:
            def __init__(self, data: bytes) -> None:
                self.data = data

            async def __aenter__(self) -> Body:
                return self

            async def __aexit__(self, *exc: object) -> None:
                return None

            async def read(self) -> bytes:
                return self.data

        class AiobotocoreLike:
            async def invoke_agent_runtime(self, **kwargs: Any) -> dict[str, Any]:
                status, body = seam._post(kwargs)
                return {"statusCode": status, "response": Body(body)}

        return AiobotocoreLike()


@pytest.mark.parametrize(
    ("client_class", "app_name", "shape"),
    [
        (ArtHttpClient, "ours", "asynchronous"),
        (AgentCoreHttpClient, "art", "sync"),
        (AgentCoreHttpClient, "art", "asynchronous"),
    ],
    ids=["art-client-our-app", "our-client-art-app-boto3", "our-client-art-app-aiobotocore"],
)
async def test_each_client_drives_the_other_packages_app(scripted, monkeypatch, client_class, app_name, shape):
    # GIVEN one package's client in front of the other's app, state polls made short
    monkeypatch.setattr("agentcore_rl_toolkit.runtime.client.POLL_INTERVAL", 0.02)
    monkeypatch.setattr("agent_app.runtime._client.POLL_INTERVAL_S", 0.02)
    app = scripted(app_name)
    aws = getattr(_Seam(app), shape)()

    async def provide() -> Any:
        return aws

    client = client_class(ARN, aws_client=provide)

    # WHEN it invokes in the foreground, fails, and runs one in the background
    assert await client.invoke({"q": 1}, session_id=SESSION) == {"echo": {"q": 1}}
    with pytest.raises((InvocationError, ArtInvocationError), match="tool crashed"):
        await client.invoke({"fail": True}, session_id=SESSION)
    handle = await client.invoke({"wait": True}, session_id=SESSION, invocation_id="bg-1", background=True)
    rebuilt = client.get_invocation(session_id=SESSION, invocation_id="bg-1")
    assert (await rebuilt.status())["status"] == "in_progress"
    app.release.set()

    # THEN the background result comes through either handle
    assert await handle.result(timeout=10) == {"echo": {"wait": True}} == await rebuilt.result(timeout=10)


def _record(message: str, exc_info: Any = None) -> logging.LogRecord:
    return logging.getLogger("agent.tools").makeRecord("agent.tools", logging.ERROR, __file__, 1, message, (), exc_info)


def _formatted(formatter: logging.Formatter, record: logging.LogRecord) -> dict[str, Any]:
    entry = json.loads(formatter.format(record))
    assert entry.pop("timestamp").endswith("Z")
    return entry


@pytest.mark.parametrize("in_request", [True, False], ids=["in_a_request", "outside"])
def test_both_formatters_write_the_same_line(in_request):
    try:
        raise KeyError("answer")
    except KeyError:
        failure = sys.exc_info()
    BedrockAgentCoreContext.set_request_context("r-1" if in_request else None, "s-1" if in_request else None)
    try:
        for record in (_record("plain é"), _record("failed", failure)):
            ours = _formatted(our_logging.CorrelatedFormatter(), record)
            assert ours == _formatted(art_logging.CorrelatedFormatter(), record)
    finally:
        BedrockAgentCoreContext.set_request_context(None, None)


@pytest.mark.parametrize("start_level", [logging.WARNING, logging.DEBUG])
def test_both_configure_logging_leave_the_root_logger_alike(start_level):
    root, sdk = logging.getLogger(), logging.getLogger("bedrock_agentcore.app")
    saved = (list(root.handlers), root.level, sdk.propagate)

    def after(configure: Callable[..., None]) -> tuple[Any, ...]:
        root.handlers[:] = [logging.NullHandler()]
        root.setLevel(start_level)
        sdk.propagate = True
        root.__dict__.pop("_art_logging_configured", None)
        configure()
        configure(logging.ERROR)  # a second call changes nothing
        (handler,) = root.handlers
        return type(handler).__name__, type(handler.formatter).__name__, root.level, sdk.propagate

    try:
        assert after(our_logging.configure_logging) == after(art_logging.configure_logging)
    finally:
        root.handlers[:], _, sdk.propagate = saved[0], root.setLevel(saved[1]), saved[2]
        root.__dict__.pop("_art_logging_configured", None)
