"""LocalStack and ``rollouts local``: every process starts, answers, and is gone afterwards."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import boto3
import httpx
import pytest

from examples.math_agent.local import MATH_AGENT, MATH_DEMO
from local_stack._process import ProcessStartError, group_alive
from local_stack.cli import add_commands, quota_settings
from local_stack.hosting import DEFAULT_MODEL_NAME, LocalAgent
from local_stack.stack import PROJECT_ROOT, LocalStack, StackSettings
from rollout_contract import ExperimentDescriptor, ExperimentResources

HERE = Path(__file__).parent
TEST_HANDLERS = {
    "dispatcher": "local_worker_handlers.dispatch",
    "finisher": "local_worker_handlers.finish",
    "sweeper": "local_worker_handlers.sweep",
}
CLI = (
    "import argparse, sys; from local_stack.cli import add_commands; from examples.math_agent.local import MATH_DEMO; "
    "p = argparse.ArgumentParser(); add_commands(p.add_subparsers(), MATH_DEMO); a = p.parse_args(); "
    "sys.exit(a.func(a))"
)


def _group_gone(pgid: int) -> bool:
    """No member of the group runs (zombies of detached processes wait for init to reap them)."""
    return not group_alive(pgid)


def _live_children() -> set[int]:
    children = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and fields[0] != "Z":
            children.add(int(stat.parent.name))
    return children


def _eventually(check: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture
def handler_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("WORKER_TEST_OUT", str(tmp_path))
    return tmp_path


@pytest.mark.processes
def test_local_stack_runs_every_part_and_leaves_no_process_behind(tmp_path: Path, handler_env: Path) -> None:
    # GIVEN a stack of one experiment, with test handlers in its workers (a second finisher environment too)
    settings = MATH_AGENT.settings(
        run_dir=tmp_path / "run", experiments=("stack-test",), handlers=TEST_HANDLERS, extra_pythonpath=(HERE,),
        sweep_interval_s=0.5, finisher_environments=2,
    )  # fmt: skip
    # WHEN it runs
    with LocalStack(settings) as stack:
        pids = [p.pid for p in stack.processes]
        names = [p.name for p in stack.processes]
        # THEN every part answers on 127.0.0.1, and the descriptor is where a trainer looks for it
        assert names == [
            "moto",
            "model",
            "emulator",
            "gateway",
            "worker-stack-test",
            "worker-stack-test-sweeper",
            "worker-stack-test-dispatcher-0",
            "worker-stack-test-dispatcher-1",
            "worker-stack-test-finisher-1",
        ]
        assert httpx.get(f"{stack.model_url}/models").status_code == 200
        assert httpx.get(f"{stack.gateway_url}/health").status_code == 200
        assert httpx.get(f"{stack.emulator_url}/_admin/stats").status_code == 200
        ssm = boto3.client("ssm", endpoint_url=stack.env["AWS_ENDPOINT_URL_SSM"], region_name=stack.env["AWS_REGION"],
                           aws_access_key_id="x", aws_secret_access_key="x")  # fmt: skip
        parameter = ExperimentResources.for_experiment("stack-test").descriptor_parameter
        descriptor = ExperimentDescriptor.model_validate_json(ssm.get_parameter(Name=parameter)["Parameter"]["Value"])
        assert descriptor.gateway_url == stack.gateway_url
        # AND it offers the stack's model by its one name, and says what the hosted agent needs
        assert descriptor.model_id == DEFAULT_MODEL_NAME
        assert descriptor.required_rollout_fields == ["base_url", "model_id"]
        assert [m["id"] for m in httpx.get(f"{stack.model_url}/models").json()["data"]] == [DEFAULT_MODEL_NAME]
        assert descriptor.endpoints["bedrock-agentcore"] == stack.emulator_url
        assert stack.env["AWS_ENDPOINT_URL_BEDROCK_AGENTCORE"] == stack.emulator_url
        assert _eventually(lambda: (handler_env / "sweep.jsonl").exists())  # the worker runs its sweeper
    # AND afterwards none of its processes (nor anything they spawned) is left
    assert all(_group_gone(pid) for pid in pids)


def test_emulator_config_registers_the_given_agent_under_its_name_per_experiment(tmp_path: Path) -> None:
    # GIVEN a stack of two experiments hosting an agent named by its caller, whose moto URL is known
    agent = LocalAgent(name="probe_agent", command=(sys.executable, "probe.py"), preload=("json",))
    stack = LocalStack(agent.settings(run_dir=tmp_path, experiments=("exp-a", "exp-b")))
    stack.moto_url = "http://127.0.0.1:5000"
    # WHEN its emulator config is built
    runtimes = stack.emulator_config()["runtimes"]
    # THEN each experiment has an ACR-style runtime ARN of that name, running that command with its preload
    assert [r["arn"] for r in runtimes] == [
        "arn:aws:bedrock-agentcore:us-east-1:000000000000:runtime/probe_agent-exp-a",
        "arn:aws:bedrock-agentcore:us-east-1:000000000000:runtime/probe_agent-exp-b",
    ]
    assert runtimes[0]["command"] == [sys.executable, "probe.py"]
    assert list(runtimes[0]["preload"]) == ["json"]
    assert runtimes[0]["working_dir"] == str(PROJECT_ROOT)
    env = runtimes[0]["environment"]
    assert env["AWS_ENDPOINT_URL_S3"] == "http://127.0.0.1:5000" and env["AWS_REGION"] == "us-east-1"
    assert env["AWS_ACCESS_KEY_ID"] and env["AWS_SECRET_ACCESS_KEY"]


@pytest.mark.processes
def test_a_stack_that_fails_to_start_stops_what_it_started(tmp_path: Path, handler_env: Path) -> None:
    # GIVEN a stack whose worker cannot import its dispatcher
    children_before = _live_children()
    settings = StackSettings(
        run_dir=tmp_path, experiments=("broken",), emulator=False, gateway=False,
        handlers={**TEST_HANDLERS, "dispatcher": "no_such_module.handler"}, extra_pythonpath=(HERE,),
    )  # fmt: skip
    # WHEN it starts
    with pytest.raises(ProcessStartError, match="worker-broken-dispatcher-0 exited"):
        LocalStack(settings).start()
    # THEN the error points at the log and nothing it started is still running
    assert "no_such_module" in (tmp_path / "worker-broken-dispatcher-0.log").read_text()
    assert _live_children() <= children_before


def test_settings_refuse_an_emulator_without_an_agent_and_an_agent_name_acr_would_refuse(tmp_path: Path) -> None:
    # GIVEN settings that run the emulator but name no agent, and an agent whose name ACR refuses
    # WHEN settings are built THEN each error says what to give
    with pytest.raises(ValueError, match="agent_command"):
        StackSettings(run_dir=tmp_path)
    with pytest.raises(ValueError, match="letter, then letters, digits or '_'"):
        LocalAgent(name="math-agent", command=(sys.executable, "app.py"))


def test_settings_refuse_a_model_url_that_is_not_http(tmp_path: Path) -> None:
    # GIVEN a model URL without a scheme
    # WHEN settings are built THEN the error says what is expected
    with pytest.raises(ValueError, match="http"):
        StackSettings(run_dir=tmp_path, model_base_url="localhost:8000/v1", emulator=False)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    return subprocess.run(
        [sys.executable, "-c", CLI, *args], capture_output=True, text=True, env=env, cwd=PROJECT_ROOT, timeout=90
    )


@pytest.mark.processes
def test_rollouts_local_up_status_down_round_trip(tmp_path: Path) -> None:
    # GIVEN no stack in the run directory
    run_dir = str(tmp_path / "cli")
    # WHEN `local up` starts one detached
    up = _cli("local", "up", "--run-dir", run_dir, "--exp", "cli-test", "--no-workers")
    state = json.loads((tmp_path / "cli" / "state.json").read_text())
    try:
        # THEN its processes and URLs are recorded and `status` sees them alive
        assert up.returncode == 0, up.stderr
        assert {p["name"] for p in state["processes"]} == {"moto", "model", "emulator", "gateway"}
        status = _cli("local", "status", "--run-dir", run_dir)
        assert status.returncode == 0 and status.stdout.count(" alive ") == 4
        exports = _cli("local", "status", "--run-dir", run_dir, "--env").stdout
        assert f"export AWS_ENDPOINT_URL_SQS={state['urls']['moto']}" in exports
        # AND a second `up` is refused while it runs
        again = _cli("local", "up", "--run-dir", run_dir, "--no-workers")
        assert again.returncode == 1 and "already runs" in again.stderr
    finally:
        # WHEN `local down` runs
        down = _cli("local", "down", "--run-dir", run_dir)
    # THEN every process is gone and the state file removed
    assert down.returncode == 0, down.stderr
    assert all(_group_gone(p["pid"]) for p in state["processes"])
    assert not (tmp_path / "cli" / "state.json").exists()


CTRL_C_SCRIPT = """
import json, sys, time
from pathlib import Path
from local_stack.stack import LocalStack, StackSettings
settings = StackSettings(run_dir=Path(sys.argv[1]), experiments=("ctrl-c",), emulator=False, workers=False)
with LocalStack(settings) as stack:
    print(json.dumps([p.pid for p in stack.processes]), flush=True)
    time.sleep(60)
"""


@pytest.mark.processes
def test_ctrl_c_stops_every_process_of_a_running_stack(tmp_path: Path) -> None:
    # GIVEN a program running a stack inside `with LocalStack(...)`
    program = subprocess.Popen(
        [sys.executable, "-c", CTRL_C_SCRIPT, str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
    )
    try:
        pids = json.loads(program.stdout.readline())
        assert pids and not any(_group_gone(pid) for pid in pids)
        # WHEN it gets Ctrl-C (SIGINT)
        program.send_signal(signal.SIGINT)
        # each process may take its 5 s SIGTERM grace, 2 s after SIGKILL and 5 s to be reaped, one by one
        program.wait(timeout=90)
    finally:
        program.kill()
        program.communicate()
    # THEN all of the stack's processes are gone
    assert all(_group_gone(pid) for pid in pids)


def test_local_up_quota_flags_set_the_emulator_quotas_and_the_dispatchers_budgets(tmp_path: Path) -> None:
    # GIVEN `rollouts local up --invoke-tps 5 --max-sessions 20` as settings
    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers(), MATH_DEMO)
    args = parser.parse_args(["local", "up", "--invoke-tps", "5", "--max-sessions", "20"])
    stack = LocalStack(
        args.agent.settings(
            run_dir=tmp_path,
            **quota_settings(invoke_tps=args.invoke_tps, max_sessions=args.max_sessions),
        )
    )
    stack.moto_url = "http://127.0.0.1:5000"
    # WHEN the emulator's config and a dispatcher worker's command line are built
    config = stack.emulator_config()
    argv = stack._worker_process("demo", {}, "worker-demo-dispatcher-0", ("dispatcher",)).argv
    # THEN the emulator enforces the quotas, and the dispatchers budget for exactly them
    assert config["max_active_sessions"] == 20
    assert config["runtimes"][0]["invoke_tps"] == 5
    assert config["runtimes"][0]["preload"]
    assert argv[argv.index("--tps-limit") + 1] == "5.0"
    assert argv[argv.index("--session-budget") + 1] == "20"


@pytest.mark.processes
@pytest.mark.parametrize("flags", [["--invoke-tps", "0"], ["--max-sessions", "-1"], ["--sweep-interval", "0"]])
def test_local_up_refuses_quotas_and_intervals_that_are_not_positive(tmp_path: Path, flags: list[str]) -> None:
    result = subprocess.run(
        [sys.executable, "-c", CLI, "local", "up", "--run-dir", str(tmp_path), *flags],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        timeout=60,
    )
    assert result.returncode == 2
    assert "must be positive" in result.stderr or "must be a positive" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "state.json").exists()
