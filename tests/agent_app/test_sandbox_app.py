"""``agent_app.sandbox.SandboxApp``: ART's sandbox protocol over HTTP, driven through Starlette's test client.

ART's own client drives the app through the ACR emulator in ``tests/ml/test_art_sandbox.py``; these tests pin the
wire answers (status codes, fields) that a client sees only as a 424 through ACR.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from agent_app.confinement import SANDBOX_UID, Isolation
from agent_app.sandbox import SandboxApp
from rollout_contract.protocol import SESSION_HEADER
from rollout_contract.sandbox import OUTPUT_LIMIT_BYTES, RESULT_FIELD_TYPES, new_sandbox_session_id

SESSION = new_sandbox_session_id()


class Sandbox:
    """One app on one event loop (background commands live on between requests)."""

    def __init__(self, state_dir: Path, **options: Any) -> None:
        options = options or {"isolation": Isolation.UNCONFINED}  # the protocol's cases share files with commands
        self.http = TestClient(SandboxApp(state_dir=state_dir, **options)).__enter__()

    def post(self, body: Any) -> tuple[int, Any]:
        response = self.http.post("/invocations", json=body, headers={SESSION_HEADER: SESSION})
        return response.status_code, response.json()

    def run(self, operation: str, invocation_id: str | None = None, **fields: Any) -> tuple[int, Any]:
        config: dict[str, Any] = {
            "version": 1,
            "operation": operation,
            "invocation_id": invocation_id or uuid.uuid4().hex,
        }
        if operation == "start":
            config["background"] = fields.pop("background", False)
        return self.post({"_agentcore_runtime": config, **fields})

    def ping(self) -> str:
        return str(self.http.get("/ping").json()["status"])

    def close(self) -> None:
        self.http.__exit__(None, None, None)


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    app = Sandbox(tmp_path / "records")
    yield app
    app.close()


def sh(script: str) -> list[str]:
    return ["/bin/sh", "-c", script]


def test_a_foreground_command_answers_with_its_exit_code_and_output(sandbox: Sandbox, tmp_path: Path):
    # WHEN a command runs in a directory, with a variable over the sandbox's environment
    status, state = sandbox.run(
        "start", "cmd.1", command=sh('printf "$GREETING"; pwd >&2; exit 3'), cwd=str(tmp_path), env={"GREETING": "hi"}
    )

    # THEN the answer is the completed state with ART's result fields; a nonzero exit is a result
    assert status == 200
    assert state == {
        "version": 1,
        "invocation_id": "cmd.1",
        "status": "completed",
        "result": {
            "exit_code": 3,
            "stdout": "hi",
            "stderr": f"{tmp_path}\n",
            "timed_out": False,
            "stdout_truncated": False,
            "stderr_truncated": False,
        },
    }
    assert {name: type(value) for name, value in state["result"].items()} == RESULT_FIELD_TYPES


def test_a_background_command_is_in_progress_then_completed_and_keeps_the_session_busy(
    sandbox: Sandbox, tmp_path: Path
):
    # GIVEN a background command that waits for a file
    release = tmp_path / "release"
    status, state = sandbox.run(
        "start", "bg", background=True, command=sh(f"while [ ! -e {release} ]; do sleep 0.01; done")
    )
    assert (status, state["status"]) == (200, "in_progress")

    # THEN it is in progress and the session busy until the file appears, then completed and the session idle
    assert sandbox.run("get", "bg")[1]["status"] == "in_progress"
    assert sandbox.ping() == "HealthyBusy"
    release.touch()
    deadline = time.monotonic() + 10
    while (state := sandbox.run("get", "bg")[1])["status"] == "in_progress" and time.monotonic() < deadline:
        time.sleep(0.02)
    assert state["status"] == "completed" and state["result"]["exit_code"] == 0
    assert sandbox.ping() == "Healthy"


def test_a_repeated_start_returns_the_first_answer_and_runs_nothing(sandbox: Sandbox, tmp_path: Path):
    # GIVEN a command that appends to a file, run once
    counter = tmp_path / "counter"
    first = sandbox.run("start", "once", command=sh(f"echo run >> {counter}; echo first"))[1]

    # WHEN the same id is started again with another command, and a malformed one
    again = sandbox.run("start", "once", command=sh(f"echo run >> {counter}; echo second"))[1]
    malformed = sandbox.run("start", "once", command=[])

    # THEN both answer with the first command's state, and the file was written once
    assert again == first and malformed == (200, first)
    assert first["result"]["stdout"] == "first\n"
    assert counter.read_text() == "run\n"


def test_a_command_past_its_deadline_is_killed_and_keeps_its_partial_output(sandbox: Sandbox):
    # WHEN a command outlives its 1 s timeout
    started = time.monotonic()
    state = sandbox.run("start", command=sh("printf partial; sleep 30"), timeout=1)[1]

    # THEN it ends at the deadline, killed (exit -1), with what it wrote
    assert time.monotonic() - started < 10
    assert state["result"] == {
        "exit_code": -1,
        "stdout": "partial",
        "stderr": "",
        "timed_out": True,
        "stdout_truncated": False,
        "stderr_truncated": False,
    }


def test_output_waiting_counts_towards_the_deadline(sandbox: Sandbox):
    # WHEN a command exits at once but leaves a process holding its output open
    state = sandbox.run("start", command=sh("printf early; sleep 30 &"), timeout=1)[1]

    # THEN the wait for that output ends at the deadline: timed out, with the command's own exit code
    assert state["result"]["timed_out"] is True
    assert (state["result"]["exit_code"], state["result"]["stdout"]) == (0, "early")


def test_each_stream_keeps_its_first_256_kib_and_says_it_was_cut(sandbox: Sandbox):
    # WHEN a command writes 300,000 bytes to each stream
    script = "head -c 300000 /dev/zero | tr '\\0' a; head -c 300000 /dev/zero | tr '\\0' b >&2"
    result = sandbox.run("start", command=sh(script))[1]["result"]

    # THEN each stream holds its first 256 KiB and is flagged, and the command still completed
    assert result["stdout"] == "a" * OUTPUT_LIMIT_BYTES and result["stdout_truncated"] is True
    assert result["stderr"] == "b" * OUTPUT_LIMIT_BYTES and result["stderr_truncated"] is True
    assert result["exit_code"] == 0


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"command": []}, "command must be a non-empty list of strings"),
        ({"command": "echo hi"}, "command must be a non-empty list of strings"),
        ({"command": ["echo", 1]}, "command must be a non-empty list of strings"),
        ({"command": ["true"], "timeout": 0}, "timeout must be between 1 and 3600"),
        ({"command": ["true"], "timeout": 3601}, "timeout must be between 1 and 3600"),
        ({"command": ["true"], "timeout": 1.5}, "timeout must be a whole number"),
        ({"command": ["true"], "cwd": 7}, "cwd must be a string"),
        ({"command": ["true"], "env": {"A=B": "x"}}, "env must be an object of strings"),
        ({"command": ["true"], "env": {"A": 1}}, "env must be an object of strings"),
        ({"command": ["true"], "network": "yes"}, "network must be true or false"),
    ],
)
def test_a_malformed_command_is_refused_with_400_and_nothing_recorded(sandbox: Sandbox, fields: dict, message: str):
    # WHEN a new command is malformed
    status, body = sandbox.run("start", "bad", **fields)

    # THEN 400 says what is wrong, and the id is still free
    assert status == 400 and message in body["error"]
    assert sandbox.run("get", "bad")[1]["status"] == "not_found"


@pytest.mark.parametrize(
    "config",
    [
        {"version": 2, "operation": "get", "invocation_id": "a"},
        {"version": 1, "operation": "cancel", "invocation_id": "a"},
        {"version": 1, "operation": "get", "invocation_id": ".starts-with-a-dot"},
        {"version": 1, "operation": "get", "invocation_id": "a" * 129},
    ],
)
def test_a_malformed_envelope_is_refused_with_400(sandbox: Sandbox, config: dict):
    assert sandbox.post({"_agentcore_runtime": config})[0] == 400


def test_a_command_that_cannot_start_completes_with_an_execution_failed_error(sandbox: Sandbox, tmp_path: Path):
    # WHEN the executable or the directory does not exist
    missing_program = sandbox.run("start", command=["/no/such/program"])[1]
    missing_directory = sandbox.run("start", command=["true"], cwd=str(tmp_path / "nowhere"))[1]

    # THEN each is completed with ART's error object, not a result
    for state in (missing_program, missing_directory):
        assert state["status"] == "completed" and "result" not in state
        assert state["error"]["code"] == "execution_failed"
        assert "No such file or directory" in state["error"]["message"]


def test_session_actions_hold_and_release_the_session(sandbox: Sandbox):
    # GIVEN an idle sandbox
    assert sandbox.post({"action": "status"}) == (200, {"status": "ok", "state": "healthy"})

    # WHEN it is started, then stopped
    started = sandbox.post({"action": "start"})
    busy = sandbox.ping()
    stopped = sandbox.post({"action": "stop"})

    # THEN start holds it busy (ping HealthyBusy) and stop releases it
    assert started == (200, {"status": "ok", "state": "busy"}) and busy == "HealthyBusy"
    assert stopped == (200, {"status": "ok", "state": "healthy"}) and sandbox.ping() == "Healthy"


def test_a_start_with_ttl_releases_the_hold_by_itself(sandbox: Sandbox):
    # WHEN the session is held for at most 0.3 s
    assert sandbox.post({"action": "start", "ttl_seconds": 0.3})[1]["state"] == "busy"

    # THEN it is idle again afterwards without a stop
    time.sleep(0.6)
    assert sandbox.ping() == "Healthy"


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({}, "missing action"),
        ({"action": "restart"}, "unknown action: restart"),
        ({"action": "start", "ttl_seconds": 0}, "ttl_seconds must be a positive number"),
        (["start"], "the body must be a JSON object"),
    ],
)
def test_a_bad_session_action_is_refused_with_400(sandbox: Sandbox, body: Any, error: str):
    status, answer = sandbox.post(body)
    assert (status, answer["status"]) == (400, "error") and answer["error"].startswith(error)


def test_a_command_recorded_by_a_process_that_is_gone_is_interrupted(tmp_path: Path):
    # GIVEN a background command started by one app process
    first = Sandbox(tmp_path / "records")
    first.run("start", "lost", background=True, command=sh("sleep 3"))
    first.close()

    # WHEN a new process on the same records answers for it
    second = Sandbox(tmp_path / "records")
    try:
        state = second.run("get", "lost")[1]
    finally:
        second.close()

    # THEN it is interrupted, not in progress forever
    assert state["status"] == "interrupted"


@pytest.mark.skipif(os.geteuid() != 0, reason="the strict isolation needs root (D101)")
def test_a_confined_command_runs_as_the_sandbox_user_in_the_workspace_without_the_records_or_the_network(
    tmp_path: Path,
):
    # GIVEN the daemon in the strict isolation, with a workspace, and a variable in its own environment
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    os.environ["DAEMON_SECRET"] = "s3cr3t"
    sandbox = Sandbox(tmp_path / "records", isolation=Isolation.STRICT, workspace=workspace)
    try:
        # WHEN commands look at who they are, where, what they see of the records, and the network
        script = 'id -u; pwd; echo "$DAEMON_SECRET$GREETING"; ls %s | wc -l; wc -l < /proc/net/dev; touch made'
        _, offline = sandbox.run("start", "c.1", command=sh(script % (tmp_path / "records")), env={"GREETING": "hi"})
        _, online = sandbox.run("start", "c.2", command=sh("wc -l < /proc/net/dev"), network=True)
    finally:
        del os.environ["DAEMON_SECRET"]
        sandbox.close()
    # THEN each ran as the sandbox user in the workspace (its file kept there), with only the command's variables,
    # the records hidden, only loopback without the network granted
    lines = offline["result"]["stdout"].splitlines()
    assert lines == [str(SANDBOX_UID), str(workspace), "hi", "0", "3"], offline
    assert (workspace / "made").stat().st_uid == SANDBOX_UID
    assert int(online["result"]["stdout"]) > 3
