"""Every ACR error the emulator answers with, as boto3 sees it: status, x-amzn-ErrorType and message."""

from __future__ import annotations

import json
import sys
import time

import httpx
import pytest
from acr_helpers import AGENTS, FIXED_PORT, MAX_PAYLOAD_BYTES, admin, arn, invoke_json
from botocore.exceptions import ClientError

from local_stack.acr_emulator import EmulatorConfig, RuntimeConfig, start_emulator
from rollout_contract import new_session_id
from rollout_contract.protocol import ERROR_TYPE_HEADER

pytestmark = pytest.mark.processes


def _invoke_error(client, runtime_arn: str, session_id: str, payload: bytes = b"{}", **kwargs) -> ClientError:
    with pytest.raises(ClientError) as raised:
        client.invoke_agent_runtime(agentRuntimeArn=runtime_arn, runtimeSessionId=session_id, payload=payload, **kwargs)
    return raised.value


def _assert_acr_error(error: ClientError, code: str, status: int) -> None:
    assert error.response["Error"]["Code"] == code
    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == status
    assert error.response["ResponseMetadata"]["HTTPHeaders"][ERROR_TYPE_HEADER.lower()] == code
    assert error.response["Error"]["Message"]


def test_unknown_runtime_is_resource_not_found(client, session_id):
    # GIVEN an ARN the emulator does not host
    # WHEN it is invoked
    error = _invoke_error(client, arn("missing"), session_id)
    # THEN the answer is 404 ResourceNotFoundException naming the hosted runtimes
    _assert_acr_error(error, "ResourceNotFoundException", 404)
    assert arn("basic") in error.response["Error"]["Message"]


def test_unknown_qualifier_is_resource_not_found_and_a_known_one_is_served(client, session_id):
    # GIVEN a runtime with endpoints DEFAULT and canary
    # WHEN it is invoked on an endpoint it does not have, then on one it has
    error = _invoke_error(client, arn("qualified"), session_id, qualifier="prod")
    served = client.invoke_agent_runtime(
        agentRuntimeArn=arn("qualified"), runtimeSessionId=session_id, payload=b"{}", qualifier="canary"
    )
    # THEN the first is 404 and the second reaches the agent
    _assert_acr_error(error, "ResourceNotFoundException", 404)
    assert json.loads(served["response"].read())["session_id"] == session_id


@pytest.mark.parametrize("length", [32, 257])
def test_session_id_outside_33_to_256_characters_is_a_validation_error(emulator, make_client, length):
    # GIVEN a client that skips botocore's own length check, so the emulator sees the bad id
    client = make_client(emulator.url, parameter_validation=False)
    # WHEN it invokes with a session id of the wrong length
    error = _invoke_error(client, arn("basic"), "s" * length)
    # THEN the emulator rejects it with 400 ValidationException
    _assert_acr_error(error, "ValidationException", 400)


def test_payload_over_the_limit_is_a_validation_error(client, session_id):
    # GIVEN an emulator whose payload limit is 64 KiB (ACR's is 100 MB)
    # WHEN a larger payload is sent
    error = _invoke_error(client, arn("basic"), session_id, payload=b"x" * (MAX_PAYLOAD_BYTES + 1))
    # THEN it is rejected with 400 before any session starts
    _assert_acr_error(error, "ValidationException", 400)
    assert session_id not in {s["session_id"] for s in admin(client.meta.endpoint_url, "sessions")["sessions"]}


def test_agent_not_ready_within_the_startup_limit_is_runtime_client_error(client, emulator, session_id):
    # GIVEN an agent that never answers /ping and a 1 s start-up limit
    started = time.monotonic()
    # WHEN a session starts
    error = _invoke_error(client, arn("never-ready"), session_id)
    # THEN the invoke fails with 424 RuntimeClientError at the limit, and the process is gone
    _assert_acr_error(error, "RuntimeClientError", 424)
    assert 1.0 <= time.monotonic() - started < 5.0
    views = [s for s in admin(emulator.url, "sessions")["sessions"] if s["session_id"] == session_id]
    assert views[0]["end_reason"] == "startup_failed"


def test_agent_that_ignores_port_fails_fast_saying_to_read_port(client, emulator, session_id):
    # GIVEN an agent that listens on a fixed port (as a stock app.run() on 8080 does), not on its PORT,
    # and a 60 s start-up limit
    started = time.monotonic()
    # WHEN a session starts
    error = _invoke_error(client, arn("ignores-port"), session_id)
    # THEN it fails long before the limit with 424, naming the port it found and PORT
    _assert_acr_error(error, "RuntimeClientError", 424)
    assert time.monotonic() - started < 30.0
    message = error.response["Error"]["Message"]
    assert f"listens on port {FIXED_PORT} but not on its PORT" in message and "PORT environment variable" in message


def test_agent_error_status_is_runtime_client_error(client, session_id):
    # GIVEN a running agent
    # WHEN its handler answers 500
    error = _invoke_error(client, arn("basic"), session_id, payload=b'{"fail": 500}')
    # THEN the caller sees 424 RuntimeClientError naming the agent's status, as from ACR
    _assert_acr_error(error, "RuntimeClientError", 424)
    assert "500" in error.response["Error"]["Message"]


def test_burst_over_the_invoke_rate_is_throttled_and_the_rate_holds(client, emulator, session_id):
    # GIVEN a runtime limited to 2 invokes/s (bucket of 2) with a started session and a full bucket
    invoke_json(client, arn("throttled"), session_id)
    time.sleep(1.1)
    since = time.time()
    # WHEN invokes are sent back to back for 1.2 s
    accepted = throttled = 0
    while time.time() - since < 1.2:
        try:
            invoke_json(client, arn("throttled"), session_id)
            accepted += 1
        except client.exceptions.ThrottlingException as e:
            assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 429
            throttled += 1
    elapsed = time.time() - since
    # THEN excess invokes got 429 and the invocation log shows at most bucket + rate x time accepted
    assert throttled > 0
    logged = [t for t in admin(emulator.url, "invocations")["invocations"][arn("throttled")] if t >= since]
    assert len(logged) == accepted
    assert 2 <= accepted <= 2 + 2 * elapsed + 1
    # AND the endpoint's call log holds exactly the accepted calls, each with its kind and session
    calls = [c for c in admin(emulator.url, "calls")["calls"][arn("throttled")]["DEFAULT"] if c[0] >= since]
    assert [c[1:] for c in calls] == [["invoke", session_id]] * accepted


def test_new_session_beyond_the_active_session_quota_is_service_quota_exceeded(make_client):
    # GIVEN an emulator allowing one active session, with that session running
    runtime = RuntimeConfig(arn=arn("quota"), command=(sys.executable, str(AGENTS / "stdlib_agent.py")))
    with start_emulator(EmulatorConfig(runtimes=(runtime,), max_active_sessions=1)) as emulator:
        client = make_client(emulator.url)
        first, second = new_session_id(), new_session_id()
        invoke_json(client, runtime.arn, first)
        # WHEN a second session is started
        error = _invoke_error(client, runtime.arn, second)
        # THEN it is refused with 402, and admitted once the first is stopped
        _assert_acr_error(error, "ServiceQuotaExceededException", 402)
        assert admin(emulator.url, "stats")["counters"]["quota_rejections"] == 1
        client.stop_runtime_session(agentRuntimeArn=runtime.arn, runtimeSessionId=first)
        assert invoke_json(client, runtime.arn, second)["session_id"] == second


def test_a_throttle_storm_lowers_the_invoke_rate_for_a_while(client, emulator, session_id):
    # GIVEN a started session on a runtime of 25 invokes/s
    invoke_json(client, arn("basic"), session_id)
    # WHEN a storm lowers the rate to 0.1/s for 2 s (bucket of 0.1: no whole token)
    response = httpx.post(f"{emulator.url}/_admin/throttle", json={"invoke_tps": 0.1, "seconds": 2}, timeout=5)
    assert response.status_code == 200
    # THEN invokes are throttled during the storm and accepted again after it
    with pytest.raises(client.exceptions.ThrottlingException):
        invoke_json(client, arn("basic"), session_id)
    time.sleep(2.2)
    assert invoke_json(client, arn("basic"), session_id)["session_id"] == session_id
    assert admin(emulator.url, "stats")["counters"]["throttle_storms"] == 1
    bad = httpx.post(f"{emulator.url}/_admin/throttle", json={"invoke_tps": 0}, timeout=5)
    assert bad.status_code == 400


def test_each_endpoint_has_its_own_invoke_rate(make_client):
    # GIVEN a runtime of 1 invoke/s per endpoint, with two endpoints
    runtime = RuntimeConfig(
        arn=arn("endpoints"),
        command=(sys.executable, str(AGENTS / "stdlib_agent.py")),
        qualifiers=("DEFAULT", "second"),
        invoke_tps=1,
    )
    with start_emulator(EmulatorConfig(runtimes=(runtime,))) as emulator:
        client = make_client(emulator.url)
        first, second = new_session_id(), new_session_id()
        # WHEN the first endpoint's token is spent and both are invoked at once
        invoke_json(client, runtime.arn, first)
        error = _invoke_error(client, runtime.arn, first)
        # THEN the first is throttled (429) and the second endpoint still takes its own invoke
        _assert_acr_error(error, "ThrottlingException", 429)
        assert "endpoint DEFAULT" in error.response["Error"]["Message"]
        answer = client.invoke_agent_runtime(
            agentRuntimeArn=runtime.arn, runtimeSessionId=second, qualifier="second", payload=b"{}"
        )
        assert json.loads(answer["response"].read())["session_id"] == second
