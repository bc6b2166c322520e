"""Token traces from the gateway, joined to results on the session id."""

from __future__ import annotations

import httpx

from trainer_client import RolloutClient, TraceSettings

TRACE = {"trace_id": "t1", "prompt_token_ids": [1, 2], "completion_token_ids": [3, 4], "logprobs": [-0.1, -0.2]}


class Gateway:
    """A gateway whose plain trace list grows by one call per read until ``calls`` (fire-and-forget writes).

    With ``settled`` it also serves ``trainer_client.gateway``'s settled route, which returns every call at once.
    """

    def __init__(self, calls: int, *, settled: bool) -> None:
        self.calls = calls
        self.settled = settled
        self.reads: list[tuple[str, str]] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        _, sessions, session_id, *route = request.url.path.split("/")
        assert sessions == "sessions"
        self.reads.append((session_id, "/".join(route)))
        if route == ["traces", "settled"]:
            if not self.settled:
                return httpx.Response(404, json={"detail": "Not Found"})
            assert request.url.params["timeout_s"] == "30.0"
            return self._traces(session_id, self.calls, in_flight=0)
        assert route == ["traces"]
        return self._traces(session_id, min(self.reads.count((session_id, "traces")), self.calls))

    @staticmethod
    def _traces(session_id: str, count: int, *, in_flight: int | None = None) -> httpx.Response:
        headers = {} if in_flight is None else {"X-Calls-In-Flight": str(in_flight)}
        return httpx.Response(
            200, json=[{**TRACE, "trace_id": f"t{i}", "session_id": session_id} for i in range(count)], headers=headers
        )


def _run_one(descriptor, backend, fast_poll, gateway: Gateway):
    with RolloutClient.from_descriptor(
        descriptor,
        poll=fast_poll,
        gateway_url="http://gateway:9000/",
        traces=TraceSettings(attempts=5, delay_s=0.01),
        gateway_transport=httpx.MockTransport(gateway.handle),
    ) as client:
        future = client.invoke({"q": 1})
        (request,) = backend.serve(1)
        return future.session_id, request, future.result(timeout=5)


def test_results_carry_the_sessions_token_traces_from_one_settled_read(descriptor, backend, fast_poll):
    # GIVEN a client with our token gateway (settled route)
    gateway = Gateway(calls=2, settled=True)
    # WHEN a rollout runs
    session_id, request, result = _run_one(descriptor, backend, fast_poll, gateway)
    # THEN the agent was pointed at its gateway session, and one read brought every trace
    assert request.rollout["base_url"] == f"http://gateway:9000/sessions/{session_id}/v1"
    assert [t.completion_token_ids for t in result.token_traces] == [[3, 4], [3, 4]]
    assert result.token_traces[0].logprobs == [-0.1, -0.2]
    assert gateway.reads == [(session_id, "traces/settled")]


def test_a_plain_gateway_is_re_read_until_the_trace_count_stops_growing(descriptor, backend, fast_poll):
    # GIVEN a plain rllm-model-gateway (no settled route) whose last trace lands after the result
    gateway = Gateway(calls=2, settled=False)
    # WHEN a rollout runs
    session_id, _, result = _run_one(descriptor, backend, fast_poll, gateway)
    # THEN the client fell back to re-reading /traces and kept the list once two reads agreed
    assert [t.completion_token_ids for t in result.token_traces] == [[3, 4], [3, 4]]
    assert gateway.reads == [(session_id, "traces/settled")] + [(session_id, "traces")] * 3


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
