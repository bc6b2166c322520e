"""``agent_app.runtime``: ``AgentCoreRuntimeApp``'s start/get invocations and ``AgentCoreHttpClient`` driving them.

The client reaches the real app through its ``aws_client`` seam: a ``bedrock-agentcore``-shaped client that
posts to the app's ``/invocations`` (what ACR does with InvokeAgentRuntime).
"""

from __future__ import annotations

import io
import math
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from agent_app._sdk import BedrockAgentCoreApp
from agent_app.runtime import AgentCoreHttpClient, AgentCoreRuntimeApp, InvocationError, InvocationHandle
from rollout_contract.protocol import SESSION_HEADER

SESSION = "s" * 40
ARN = "arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/agent-abc"


def envelope(operation: str, invocation_id: str, **fields: Any) -> dict[str, Any]:
    return {"_agentcore_runtime": {"version": 1, "operation": operation, "invocation_id": invocation_id, **fields}}


class Agent:
    """An app around a handler, reachable over HTTP (``post``) and as ACR's data plane (the client's seam)."""

    def __init__(self, app: Any, handler: Callable[..., Any]) -> None:
        self.app = app
        self.app.entrypoint(handler)
        self.http = TestClient(self.app).__enter__()  # one event loop for all requests: background work lives on
        self.calls: list[dict[str, Any]] = []

    def post(self, body: Any, session_id: str = SESSION) -> Any:
        response = self.http.post("/invocations", json=body, headers={SESSION_HEADER: session_id})
        return response.status_code, response.json()

    # the bedrock-agentcore client's two operations, as the seam AgentCoreHttpClient(aws_client=...) takes
    def invoke_agent_runtime(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        response = self.http.post(
            "/invocations", content=kwargs["payload"], headers={SESSION_HEADER: kwargs["runtimeSessionId"]}
        )
        return {"statusCode": response.status_code, "response": io.BytesIO(response.content)}

    def stop_runtime_session(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        return {}


@pytest.fixture
def agents(tmp_path: Path) -> Iterator[Callable[..., Agent]]:
    made: list[Agent] = []

    def make(handler: Callable[..., Any], *, app_class: type = AgentCoreRuntimeApp, **app_kwargs: Any) -> Agent:
        if app_class is AgentCoreRuntimeApp:
            app_kwargs["state_dir"] = tmp_path / "state"
        made.append(Agent(app_class(**app_kwargs), handler))
        return made[-1]

    yield make
    for agent in made:
        agent.http.__exit__(None, None, None)


def _client(agent: Agent) -> AgentCoreHttpClient:
    async def provide() -> Agent:
        return agent

    return AgentCoreHttpClient(ARN, aws_client=provide)


def test_a_request_without_the_envelope_is_the_parents(agents):
    agent = agents(lambda payload: {"echo": payload["q"]})

    assert agent.post({"q": 1}) == (200, {"echo": 1})


def test_a_foreground_start_answers_with_the_completed_state(agents):
    agent = agents(lambda payload: {"echo": payload})

    status, body = agent.post({"q": 1, **envelope("start", "inv-1")})

    # the handler saw the payload without the envelope
    assert (status, body) == (
        200,
        {"version": 1, "invocation_id": "inv-1", "status": "completed", "result": {"echo": {"q": 1}}},
    )


def test_a_background_start_runs_once_is_busy_and_can_be_got_until_done(agents):
    # GIVEN a handler that waits to be released
    release, runs = threading.Event(), []

    def handler(payload):
        runs.append(payload)
        release.wait(5)
        return "done"

    agent = agents(handler)

    # WHEN it starts in the background, is started again with the same id, and is got while running
    started = agent.post({**envelope("start", "inv-1", background=True)})
    again = agent.post({**envelope("start", "inv-1", background=True)})
    running = agent.post(envelope("get", "inv-1"))
    busy = agent.http.get("/ping").json()["status"]
    release.set()
    for _ in range(100):
        if (finished := agent.post(envelope("get", "inv-1")))[1]["status"] == "completed":
            break
        threading.Event().wait(0.02)

    # THEN one run; in_progress until it finished, HealthyBusy meanwhile; then the result
    assert len(runs) == 1
    assert [started[1]["status"], again[1]["status"], running[1]["status"], busy] == [
        "in_progress", "in_progress", "in_progress", "HealthyBusy"
    ]  # fmt: skip
    assert finished == (200, {"version": 1, "invocation_id": "inv-1", "status": "completed", "result": "done"})
    assert agent.http.get("/ping").json()["status"] == "Healthy"


@pytest.mark.parametrize(
    ("returned", "error"),
    [(ValueError("bad tool"), "bad tool"), (math.nan, "Out of range float values are not JSON compliant")],
)
def test_a_failure_or_a_result_json_cannot_hold_completes_with_an_error(agents, returned, error):
    def handler(payload):
        if isinstance(returned, Exception):
            raise returned
        return {"x": returned}

    agent = agents(handler)

    assert agent.post(envelope("start", "inv-1"))[1] == {
        "version": 1, "invocation_id": "inv-1", "status": "completed", "error": error
    }  # fmt: skip


def test_unknown_ids_are_not_found_and_lost_work_is_interrupted(agents, tmp_path):
    # GIVEN a process that recorded a start and went away (its record says in_progress, no live execution)
    first = agents(lambda payload: "never")
    first.app._store.start(SESSION, "inv-lost")

    # WHEN a new process on the same state directory is asked
    second = agents(lambda payload: "x")

    # THEN the lost invocation is interrupted, an unknown one not found, another session's not visible
    assert second.post(envelope("get", "inv-lost"))[1]["status"] == "interrupted"
    assert second.post(envelope("get", "inv-none"))[1]["status"] == "not_found"
    assert second.post(envelope("get", "inv-lost"), session_id="t" * 40)[1]["status"] == "not_found"


@pytest.mark.parametrize(
    ("runtime_envelope", "message"),
    [
        ({"version": 2, "operation": "get", "invocation_id": "a"}, "version must be 1"),
        ({"version": 1, "operation": "run", "invocation_id": "a"}, "operation must be 'start' or 'get'"),
        ({"version": 1, "operation": "get", "invocation_id": "-a"}, "invocation_id must be 1-128"),
        ({"version": 1, "operation": "get", "invocation_id": "a", "background": True}, "belongs to a start"),
        ({"version": 1, "operation": "start", "invocation_id": "a", "background": "yes"}, "true or false"),
        ({"version": 1, "operation": "get", "invocation_id": "a", "extra": 1}, "unknown field(s) extra"),
        ("start", "must be an object"),
    ],
)
def test_a_bad_envelope_is_400_naming_the_field(agents, runtime_envelope, message):
    agent = agents(lambda payload: "x")

    status, body = agent.post({"_agentcore_runtime": runtime_envelope})

    assert status == 400 and message in body["error"]


def test_a_background_app_starts_plain_requests_under_new_ids(agents):
    agent = agents(lambda payload: "x", background=True)

    status, body = agent.post({"q": 1})

    assert status == 200 and body["status"] == "in_progress" and len(body["invocation_id"]) == 32


async def test_the_client_returns_a_foreground_result_and_raises_a_failure(agents):
    def handler(payload):
        if payload.get("fail"):
            raise RuntimeError("tool crashed")
        return {"answer": payload["q"] * 2}

    async with _client(agents(handler)) as client:
        assert await client.invoke({"q": 21}, session_id=SESSION) == {"answer": 42}
        with pytest.raises(InvocationError, match="tool crashed") as caught:
            await client.invoke({"fail": True}, session_id=SESSION, invocation_id="inv-9")
    assert (caught.value.invocation_id, caught.value.snapshot["status"]) == ("inv-9", "completed")


async def test_a_background_handle_polls_until_done_and_can_be_rebuilt(agents, monkeypatch):
    # GIVEN a handler that finishes after a moment, and ART's 10 s poll interval made short
    monkeypatch.setattr("agent_app.runtime._client.POLL_INTERVAL_S", 0.02)
    release = threading.Event()
    agent = agents(lambda payload: release.wait(5) and "done")
    client = _client(agent)

    # WHEN it starts in the background and is collected through a rebuilt handle
    handle = await client.invoke({}, session_id=SESSION, invocation_id="inv-1", background=True)
    rebuilt = client.get_invocation(session_id=SESSION, invocation_id="inv-1")
    assert isinstance(handle, InvocationHandle) and (await rebuilt.status())["status"] == "in_progress"
    with pytest.raises(TimeoutError):
        await rebuilt.result(timeout=0.05)
    release.set()

    # THEN both give the result
    assert await rebuilt.result(timeout=5) == "done" and await handle.result(timeout=5) == "done"


async def test_a_plain_agent_answers_the_client_directly(agents):
    # GIVEN an ordinary BedrockAgentCoreApp (no envelope support): it answers with its result
    agent = agents(lambda payload: {"plain": True}, app_class=BedrockAgentCoreApp)

    # WHEN the client invokes it in the background THEN the handle is complete at once
    handle = await _client(agent).invoke({}, session_id=SESSION, background=True)
    assert (await handle.status())["status"] == "completed" and await handle.result() == {"plain": True}
    assert len(agent.calls) == 1


async def test_the_client_refuses_the_envelope_key_in_a_payload_and_stops_sessions(agents):
    agent = agents(lambda payload: "x")
    client = _client(agent)

    with pytest.raises(ValueError, match="_agentcore_runtime is reserved"):
        await client.invoke({"_agentcore_runtime": {}}, session_id=SESSION)
    await client.stop_session(SESSION)

    assert agent.calls == [{"agentRuntimeArn": ARN, "runtimeSessionId": SESSION}]


async def test_the_clients_own_aws_client_is_in_the_runtimes_region():
    client = AgentCoreHttpClient(ARN)
    aws = await client._aws()
    assert aws.meta.region_name == "us-west-2" and aws.meta.service_model.service_name == "bedrock-agentcore"
    await client.aclose()
