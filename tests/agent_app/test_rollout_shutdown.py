"""Shutdown of ``AgentCoreRLApp``: a rollout still running ends as ``cancelled``; pending writes finish."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import boto3
import httpx
import pytest
from agent_app_support import BUCKET, SlowS3, invoke, new_session, ping, read_result, result_key_of, rollout_block
from moto.server import ThreadedMotoServer
from starlette.testclient import TestClient

from agent_app import AgentCoreRLApp
from rollout_contract.protocol import SESSION_HEADER, PingStatus
from rollout_contract.results import RolloutResult, Status

AGENT_SCRIPT = Path(__file__).with_name("sigterm_agent.py")
REPO_ROOT = Path(__file__).resolve().parents[2]


def test_lifespan_exit_ends_a_running_rollout_as_cancelled(s3):
    # GIVEN a served app whose handler is still running
    release = threading.Event()
    app = AgentCoreRLApp(s3_client=s3)
    app.rollout_entrypoint(lambda payload: release.wait(10) and {"rewards": 1.0})
    session_id = new_session()
    with TestClient(app) as client:
        invoke(client, {"_rollout": rollout_block(api_key="sk-1")}, session_id)
        assert ping(client)["status"] == PingStatus.HEALTHY_BUSY

    # WHEN the server shuts down (the TestClient exit runs the lifespan's exit, as SIGTERM does in uvicorn)
    # and the handler finishes later
    release.set()
    time.sleep(0.2)

    # THEN the stored result is cancelled (the late handler did not replace it), with the payload redacted
    result = RolloutResult(read_result(s3, session_id))
    assert result.status is Status.CANCELLED
    assert result.status_code == 499
    assert "shutting down" in result.stop_reason
    assert result.payload["_rollout"]["api_key"] != "sk-1"


def test_lifespan_exit_lets_a_pending_write_finish(s3):
    # GIVEN a served app whose handler has returned and whose result write is in flight
    slow_s3 = SlowS3(s3)
    app = AgentCoreRLApp(s3_client=slow_s3)
    app.rollout_entrypoint(lambda payload: {"rewards": 1.0})
    session_id = new_session()
    with TestClient(app) as client:
        invoke(client, {"_rollout": rollout_block()}, session_id)
        assert slow_s3.entered.wait(10)
        threading.Timer(0.2, slow_s3.release.set).start()

    # WHEN the server shuts down during the write
    # THEN shutdown waits for it, and the handler's result is what is stored
    assert RolloutResult(read_result(s3, session_id)).status is Status.SUCCEEDED


@pytest.fixture
def moto_server(aws_env):
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=BUCKET)
    yield endpoint
    server.stop()


@pytest.mark.processes
def test_sigterm_ends_the_running_rollout_as_cancelled_and_the_process_exits(moto_server):
    # GIVEN the agent as its own process (PORT=0: the OS picks the port), writing to a moto server
    env = {
        **os.environ,
        "PORT": "0",
        "AWS_ENDPOINT_URL_S3": moto_server,
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    process = subprocess.Popen(
        [sys.executable, str(AGENT_SCRIPT)], env=env, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT
    )
    try:
        port = _served_port(process)
        session_id = new_session()
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as http:
            answer = http.post("/invocations", json={"_rollout": rollout_block()}, headers={SESSION_HEADER: session_id})
            assert answer.json()["result_key"] == result_key_of(session_id)
            assert http.get("/ping").json()["status"] == PingStatus.HEALTHY_BUSY

        # WHEN it receives SIGTERM mid-rollout
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=20)

        # THEN it has exited, and the rollout's one result says cancelled
        stored = boto3.client("s3", endpoint_url=moto_server).get_object(Bucket=BUCKET, Key=result_key_of(session_id))
        assert RolloutResult.from_json_bytes(stored["Body"].read()).status is Status.CANCELLED
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stderr.close()


def _served_port(process: subprocess.Popen) -> int:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line and process.poll() is not None:
            raise AssertionError(f"agent exited early with code {process.returncode}")
        match = re.search(r"Uvicorn running on http://[^:]+:(\d+)", line)
        if match:
            return int(match.group(1))
    raise AssertionError("agent did not report its port within 30s")
