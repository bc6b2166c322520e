"""Running the emulator: endpoint discovery, shutdown without leaks, the CLI and its config file."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from acr_helpers import AGENTS, arn, invoke_json, pid_alive

from local_stack.acr_emulator import EmulatorConfig, RuntimeConfig, start_emulator
from rollout_contract import new_session_id

pytestmark = pytest.mark.processes


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "local_stack.acr_emulator", *args], capture_output=True, text=True, timeout=30
    )


def test_clients_find_the_emulator_through_the_endpoint_environment_variable(
    emulator, make_client, monkeypatch, session_id
):
    # GIVEN only AWS_ENDPOINT_URL_BEDROCK_AGENTCORE pointing at the emulator
    monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_AGENTCORE", emulator.url)
    client = make_client(None)
    # WHEN a client built without endpoint_url invokes
    body = invoke_json(client, arn("basic"), session_id)
    # THEN the emulator served it
    assert body["session_id"] == session_id


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stopping_the_emulator_ends_every_agent_process(sig, make_client, tmp_path):
    # GIVEN an emulator from a JSON config file, with two sessions and a warm process logging to files
    runtime = RuntimeConfig(
        arn=arn("leaks"),
        command=(sys.executable, str(AGENTS / "stdlib_agent.py"), "--ignore-sigterm"),
        stop_grace_s=0.2,
        warm_pool_size=1,
    )
    config_file = tmp_path / "emulator.json"
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    config_file.write_text(EmulatorConfig(runtimes=(runtime,), log_dir=log_dir).model_dump_json())
    emulator = start_emulator(config_file)
    client = make_client(emulator.url)
    bodies = [invoke_json(client, runtime.arn, new_session_id()) for _ in range(2)]
    # WHEN the emulator gets SIGTERM or SIGINT
    emulator.process.send_signal(sig)
    emulator.process.wait(timeout=15)
    emulator.stop()
    # THEN no agent process or session directory is left
    assert not any(pid_alive(b["pid"]) for b in bodies)
    assert not any(Path(b["env"]["HOME"]).parent.exists() for b in bodies)
    leftovers = subprocess.run(["pgrep", "-f", f"{AGENTS / 'stdlib_agent.py'} --ignore-sigterm"], capture_output=True)
    assert leftovers.stdout == b""
    # AND each process had its own log file, kept after the session ended
    assert len(list(log_dir.glob("*.log"))) >= 3


def test_cli_prints_sessions_and_stats(emulator, client, session_id):
    # GIVEN an emulator with a live session
    invoke_json(client, arn("basic"), session_id)
    # WHEN the sessions and stats commands run
    sessions = _cli("sessions", "--url", emulator.url)
    stats = _cli("stats", "--url", emulator.url)
    # THEN they show the session and the counters
    assert sessions.returncode == 0
    assert session_id in sessions.stdout
    assert sessions.stdout.splitlines()[0].split()[:3] == ["session_id", "runtime_arn", "state"]
    assert stats.returncode == 0
    assert json.loads(stats.stdout)["counters"]["invokes"] >= 1


def test_cli_serve_rejects_an_invalid_config_file_naming_the_field(tmp_path):
    # GIVEN a config file whose runtime has no command
    config_file = tmp_path / "bad.json"
    config_file.write_text(json.dumps({"runtimes": [{"arn": arn("x")}]}))
    # WHEN the emulator is started with it
    result = _cli("serve", "--config", str(config_file))
    # THEN it exits with an error that names the file and the missing field
    assert result.returncode == 2
    assert str(config_file) in result.stderr
    assert "command" in result.stderr
