"""Session lifecycle, driven through boto3: start, reuse, isolation, stop, idle, max lifetime, crash, warm pool."""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from acr_helpers import NICE, SECRET_ENV, admin, arn, invoke_json, pid_alive, wait_for

from local_stack.acr_emulator.process import AGENT_SITE, release_port, reserve_port
from rollout_contract import new_session_id
from rollout_contract.protocol import REQUEST_ID_HEADER, SESSION_HEADER

pytestmark = pytest.mark.processes

TRACE_ID = "Root=1-5759e988-bd862e3fe1be46a994272793"


def test_first_invoke_starts_an_agent_and_relays_its_json_with_the_session_header(client, session_id):
    # GIVEN a runtime with no session yet
    # WHEN it is invoked with a new session id
    response = client.invoke_agent_runtime(
        agentRuntimeArn=arn("basic"), runtimeSessionId=session_id, payload=b'{"prompt": "hi"}', traceId=TRACE_ID
    )
    body = json.loads(response["response"].read())
    # THEN a live agent process answered, with the payload, session id, trace id and a request id passed through
    assert response["runtimeSessionId"] == session_id
    assert response["contentType"] == "application/json"
    assert body["payload"] == {"prompt": "hi"}
    assert body["session_id"] == session_id
    assert body["request_id"]
    headers = {k.lower(): v for k, v in body["headers"].items()}
    assert headers["x-amzn-trace-id"] == TRACE_ID
    assert {SESSION_HEADER.lower(), REQUEST_ID_HEADER.lower()} <= set(headers)
    assert pid_alive(body["pid"])


def test_concurrent_first_invokes_of_one_session_id_start_one_process(client, session_id):
    # GIVEN a runtime whose cold start takes 0.6 s, and a new session id
    # WHEN four invokes with that id arrive at once
    with ThreadPoolExecutor(4) as pool:
        pids = set(pool.map(lambda _: invoke_json(client, arn("delayed"), session_id)["pid"], range(4)))
    # THEN they all reached the same single process
    assert len(pids) == 1


def test_same_session_id_reaches_the_same_process(client, session_id):
    # GIVEN a started session
    first = invoke_json(client, arn("basic"), session_id)
    # WHEN it is invoked again
    second = invoke_json(client, arn("basic"), session_id)
    # THEN the same process answers, each request with its own request id
    assert second["pid"] == first["pid"]
    assert second["request_id"] != first["request_id"]


def test_sessions_get_separate_processes_directories_and_a_scrubbed_environment(client):
    # GIVEN an emulator whose own environment holds a secret and a variable the runtime inherits
    # WHEN two sessions start
    one = invoke_json(client, arn("basic"), new_session_id())
    two = invoke_json(client, arn("basic"), new_session_id())
    # THEN each has its own process, port, HOME, TMPDIR and working directory
    assert one["pid"] != two["pid"]
    for key in ("PORT", "HOME", "TMPDIR"):
        assert one["env"][key] != two["env"][key]
    assert one["cwd"] != two["cwd"]
    # AND only the basics plus what the runtime grants are visible
    env = one["env"]
    assert "ACR_TEST_SECRET" not in env
    assert env["ACR_TEST_INHERITED"] == SECRET_ENV["ACR_TEST_INHERITED"]
    assert env["GRANTED"] == "yes"
    basics = {"PORT", "PYTHONPATH", "HOME", "TMPDIR", "PATH", "LANG", "LANGUAGE", "TZ"}
    assert set(env) - {"ACR_TEST_INHERITED", "GRANTED", *basics} <= {k for k in env if k.startswith("LC_")}
    assert env["PYTHONPATH"] == str(AGENT_SITE)  # first on the path: the agent site (D53), nothing of the emulator's


def _niceness(pid: int) -> set[int]:
    """The niceness of every thread of process ``pid``."""
    return {os.getpriority(os.PRIO_PROCESS, int(task.name)) for task in Path(f"/proc/{pid}/task").iterdir()}


@pytest.mark.parametrize("runtime", ["niced", "forked-niced"])
def test_a_niced_runtimes_sessions_run_that_much_nicer_than_the_emulator(client, runtime):
    # GIVEN the emulator runs at this process's niceness (it inherits it), a runtime with `nice` and one without
    own = os.getpriority(os.PRIO_PROCESS, 0)
    # WHEN a session of each starts, exec-ed or forked from a template
    niced = invoke_json(client, arn(runtime), new_session_id())
    plain = invoke_json(client, arn("basic"), new_session_id())
    # THEN every thread of the niced session's process is `nice` nicer, and the other's as the emulator's
    assert _niceness(niced["pid"]) == {min(19, own + NICE)}
    assert _niceness(plain["pid"]) == {own}


def test_stop_ends_the_process_removes_its_directories_and_next_invoke_starts_fresh(client, session_id):
    # GIVEN a started session
    before = invoke_json(client, arn("basic"), session_id)
    # WHEN it is stopped
    response = client.stop_runtime_session(agentRuntimeArn=arn("basic"), runtimeSessionId=session_id)
    # THEN its process and directories are gone
    assert response["runtimeSessionId"] == session_id
    assert not pid_alive(before["pid"])
    assert not Path(before["env"]["HOME"]).exists()
    # AND the same id gets a new process on the next invoke
    after = invoke_json(client, arn("basic"), session_id)
    assert after["pid"] != before["pid"]


def test_stop_of_an_unknown_session_is_resource_not_found(client, session_id):
    # GIVEN a session id that never started
    # WHEN it is stopped
    with pytest.raises(client.exceptions.ResourceNotFoundException) as raised:
        client.stop_runtime_session(agentRuntimeArn=arn("basic"), runtimeSessionId=session_id)
    # THEN the error is 404
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_stop_kills_an_agent_that_ignores_sigterm_after_the_grace_period(client, session_id):
    # GIVEN an agent that ignores SIGTERM (grace period 0.3 s)
    pid = invoke_json(client, arn("stubborn"), session_id)["pid"]
    # WHEN its session is stopped
    started = time.monotonic()
    client.stop_runtime_session(agentRuntimeArn=arn("stubborn"), runtimeSessionId=session_id)
    # THEN it was killed once the grace period ran out
    assert not pid_alive(pid)
    assert time.monotonic() - started >= 0.3


def test_idle_session_ends_after_the_idle_timeout(client, emulator, session_id):
    # GIVEN a session on a runtime with a 0.8 s idle timeout, whose agent reports Healthy
    pid = invoke_json(client, arn("idle"), session_id)["pid"]
    # WHEN nothing happens for longer than that
    # THEN the process ends and the session is recorded as expired
    assert wait_for(lambda: not pid_alive(pid))
    ended = [s for s in admin(emulator.url, "sessions")["sessions"] if s["session_id"] == session_id]
    assert ended[0]["end_reason"] == "idle_timeout"
    # AND the same id starts a fresh process
    assert invoke_json(client, arn("idle"), session_id)["pid"] != pid


def test_healthy_busy_keeps_a_session_past_the_idle_timeout(client, session_id):
    # GIVEN a session whose agent reports HealthyBusy for 2 s (idle timeout 0.8 s)
    pid = invoke_json(client, arn("idle"), session_id, {"busy_s": 2.0})["pid"]
    # WHEN more than the idle timeout passes while it is busy
    time.sleep(1.5)
    # THEN the session is still served by the same process
    assert invoke_json(client, arn("idle"), session_id)["pid"] == pid


def test_session_ends_at_max_lifetime_even_while_busy(client, emulator, session_id):
    # GIVEN a busy session on a runtime with a 1.2 s max lifetime
    pid = invoke_json(client, arn("lifetime"), session_id, {"busy_s": 30})["pid"]
    # WHEN the lifetime passes
    # THEN the process ends
    assert wait_for(lambda: not pid_alive(pid))
    ended = [s for s in admin(emulator.url, "sessions")["sessions"] if s["session_id"] == session_id]
    assert ended[0]["end_reason"] == "max_lifetime"


def test_killed_process_ends_its_session_and_the_same_id_starts_fresh(client, emulator, session_id):
    # GIVEN a started session
    pid = invoke_json(client, arn("basic"), session_id)["pid"]
    crashes = admin(emulator.url, "stats")["counters"]["crashes"]
    # WHEN its process is killed (fault injection)
    killed = httpx.post(f"{emulator.url}/_admin/sessions/{session_id}/kill", trust_env=False)
    # THEN the session ended as a crash
    assert killed.status_code == 200
    assert not pid_alive(pid)
    assert admin(emulator.url, "stats")["counters"]["crashes"] == crashes + 1
    # AND the next invoke with that id starts a fresh process, as ACR starts a new microVM
    assert invoke_json(client, arn("basic"), session_id)["pid"] != pid


def test_process_that_exits_by_itself_ends_its_session(client, emulator, session_id):
    # GIVEN a started session
    pid = invoke_json(client, arn("basic"), session_id)["pid"]
    # WHEN its process dies outside the emulator's control
    os.kill(pid, 9)

    # THEN the monitor notices and records a crash
    def crashed() -> bool:
        views = admin(emulator.url, "sessions")["sessions"]
        return any(s["session_id"] == session_id and s["end_reason"] == "crashed" for s in views)

    assert wait_for(crashed)


def test_sse_from_a_bedrock_agentcore_app_streams_through_boto3(client, session_id):
    # GIVEN a plain BedrockAgentCoreApp agent whose handler is a generator
    # WHEN it is invoked
    response = client.invoke_agent_runtime(
        agentRuntimeArn=arn("sdk"), runtimeSessionId=session_id, payload=json.dumps({"stream": 3}).encode()
    )
    events = [line for line in response["response"].iter_lines() if line.startswith(b"data: ")]
    # THEN the events arrive as text/event-stream through boto3's streaming body
    assert response["contentType"].startswith("text/event-stream")
    assert [json.loads(e[len(b"data: ") :])["i"] for e in events] == [0, 1, 2]
    # AND the SDK read the session id from the header the emulator sent
    assert invoke_json(client, arn("sdk"), session_id, {"q": 1})["session_id"] == session_id


def _listening_addresses(port: int) -> set[str]:
    """The local IPv4 addresses (hex, as /proc shows them) with a TCP socket listening on ``port``."""
    lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return {
        cols[1].partition(":")[0]
        for cols in (line.split() for line in lines)
        if cols[3] == "0A" and int(cols[1].partition(":")[2], 16) == port
    }


@pytest.mark.parametrize("runtime", ["port-8080", "port-8080-forked"])
def test_agents_serving_on_8080_as_in_acr_get_their_own_8080_per_session(client, emulator, runtime):
    # GIVEN an unmodified agent that calls app.run() (8080, ACR's contract); the forked one runs as in a
    # container (DOCKER_CONTAINER: it binds 0.0.0.0)
    sessions = [new_session_id() for _ in range(4)]

    # WHEN four sessions start at once
    with ThreadPoolExecutor(len(sessions)) as pool:
        answers = list(pool.map(lambda sid: invoke_json(client, arn(runtime), sid), sessions))

    # THEN each session reached its own process, serving on the port the emulator gave that session, on
    # loopback only
    try:
        assert [answer["session_id"] for answer in answers] == sessions
        assert len({answer["pid"] for answer in answers}) == len(sessions)
        views = {view["session_id"]: view for view in admin(emulator.url, "sessions")["sessions"]}
        for session, answer in zip(sessions, answers, strict=True):
            assert views[session]["port"] == int(answer["port_env"])
            assert _listening_addresses(views[session]["port"]) == {"0100007F"}
    finally:
        for session in sessions:
            client.stop_runtime_session(agentRuntimeArn=arn(runtime), runtimeSessionId=session)


def test_warm_pool_hands_each_new_session_a_never_used_process(client, emulator):
    # GIVEN a runtime with a warm pool of one, filled
    assert wait_for(lambda: admin(emulator.url, "stats")["warm_pool"][arn("warm")] == 1)
    warm_starts = admin(emulator.url, "stats")["counters"]["warm_starts"]
    # WHEN a session starts, then ends, then another starts
    first_id = new_session_id()
    first = invoke_json(client, arn("warm"), first_id)["pid"]
    client.stop_runtime_session(agentRuntimeArn=arn("warm"), runtimeSessionId=first_id)
    assert wait_for(lambda: admin(emulator.url, "stats")["warm_pool"][arn("warm")] == 1)
    second = invoke_json(client, arn("warm"), new_session_id())["pid"]
    # THEN both came from the pool and no process served two sessions
    assert admin(emulator.url, "stats")["counters"]["warm_starts"] == warm_starts + 2
    assert second != first


def test_cold_start_delay_is_paid_by_a_new_session_only(client, session_id):
    # GIVEN a runtime with an injected 0.6 s cold-start delay
    # WHEN a session starts and is invoked again
    started = time.monotonic()
    invoke_json(client, arn("delayed"), session_id)
    cold = time.monotonic() - started
    started = time.monotonic()
    invoke_json(client, arn("delayed"), session_id)
    warm = time.monotonic() - started
    # THEN only the first invoke waited for it
    assert cold >= 0.6
    assert warm < 0.6


def test_two_sessions_started_at_once_are_never_given_the_same_port() -> None:
    # GIVEN the OS offers the same free port twice in a row (neither agent has bound it yet), then another
    offered = iter([41001, 41001, 41002])

    # WHEN two sessions' agents are given ports
    first = reserve_port(lambda: next(offered))
    second = reserve_port(lambda: next(offered))
    try:
        # THEN the second skips the port the first holds, so each session's pings and invocations reach its own agent
        assert (first, second) == (41001, 41002)
        # AND a port comes back once its agent has ended
        release_port(first)
        assert reserve_port(lambda: 41001) == 41001
    finally:
        release_port(41001)
        release_port(41002)
