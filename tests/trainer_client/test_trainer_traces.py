"""Token traces from the gateway, joined to results on the session id."""

from __future__ import annotations

import httpx

from trainer_client import RolloutClient, TraceSettings

TRACE = {"trace_id": "t1", "prompt_token_ids": [1, 2], "completion_token_ids": [3, 4], "logprobs": [-0.1, -0.2]}


class Gateway:
    """A gateway whose trace list grows by one call per read until ``calls`` (fire-and-forget writes)."""

    def __init__(self, calls: int) -> None:
        self.calls = calls
        self.reads: dict[str, int] = {}

    def handle(self, request: httpx.Request) -> httpx.Response:
        _, sessions, session_id, traces = request.url.path.split("/")
        assert (sessions, traces) == ("sessions", "traces")
        self.reads[session_id] = self.reads.get(session_id, 0) + 1
        visible = min(self.reads[session_id], self.calls)
        return httpx.Response(
            200, json=[{**TRACE, "trace_id": f"t{i}", "session_id": session_id} for i in range(visible)]
        )


def test_results_carry_the_sessions_token_traces_and_agents_get_the_gateway_url(descriptor, backend, fast_poll):
    # GIVEN a client with a token gateway whose last trace lands after the result
    gateway = Gateway(calls=2)
    with RolloutClient.from_descriptor(
        descriptor,
        poll=fast_poll,
        gateway_url="http://gateway:9000/",
        traces=TraceSettings(attempts=5, delay_s=0.01),
        gateway_transport=httpx.MockTransport(gateway.handle),
    ) as client:
        # WHEN a rollout runs
        future = client.invoke({"q": 1})
        (request,) = backend.serve(1)
        result = future.result(timeout=5)

    # THEN the agent was pointed at its gateway session, and the result holds every trace once complete
    assert request.rollout["base_url"] == f"http://gateway:9000/sessions/{future.session_id}/v1"
    assert [t.completion_token_ids for t in result.token_traces] == [[3, 4], [3, 4]]
    assert result.token_traces[0].logprobs == [-0.1, -0.2]
    assert gateway.reads[future.session_id] == 3


def test_unreachable_gateway_leaves_traces_empty_but_delivers_the_result(descriptor, backend, fast_poll):
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with RolloutClient.from_descriptor(
        descriptor, poll=fast_poll, gateway_url="http://gateway:9000", gateway_transport=httpx.MockTransport(refuse)
    ) as client:
        future = client.invoke({"q": 1})
        backend.serve(1)
        result = future.result(timeout=5)

    assert result.ok and result.token_traces is None
