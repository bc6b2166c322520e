"""Fork-server starts (``preload``), driven through boto3: the same session behaviour as plain process starts."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import pytest
from acr_helpers import (
    AGENTS,
    BROKEN_PRELOAD,
    PRELOAD,
    SECRET_ENV,
    admin,
    arn,
    fork_server,
    invoke_json,
    pid_alive,
    stdlib_runtime,
    wait_for,
)
from botocore.exceptions import ClientError

from local_stack.acr_emulator import EmulatorConfig, start_emulator
from local_stack.acr_emulator.process import AGENT_SITE
from rollout_contract import new_session_id

pytestmark = pytest.mark.processes


def _session_view(url: str, session_id: str) -> dict | None:
    return next((s for s in admin(url, "sessions")["sessions"] if s["session_id"] == session_id), None)


def _ended_as(url: str, session_id: str, reason: str) -> bool:
    view = _session_view(url, session_id)
    return view is not None and view["end_reason"] == reason


def test_sessions_are_forked_from_the_template_each_in_its_own_process_group(client, emulator):
    # GIVEN a runtime whose fork server preloaded a module
    template = fork_server(emulator.url, arn("forked"))
    assert template["ready"]
    first_id, second_id = new_session_id(), new_session_id()
    # WHEN two sessions start and the first is invoked again
    first = invoke_json(client, arn("forked"), first_id)
    second = invoke_json(client, arn("forked"), second_id)
    again = invoke_json(client, arn("forked"), first_id)
    # THEN both were forked by the template, which imported the module once, before either existed
    assert first["ppid"] == second["ppid"] == template["pid"]
    assert first["preload_marker_imported_by"] == second["preload_marker_imported_by"] == template["pid"]
    # AND each is its own process and process group, and a session keeps its process
    assert first["pid"] != second["pid"]
    assert (first["pgid"], second["pgid"]) == (first["pid"], second["pid"])
    assert template["pid"] not in (first["pgid"], second["pgid"])
    assert again["pid"] == first["pid"]
    assert fork_server(emulator.url, arn("forked"))["children"] >= 2


def test_forked_session_sees_only_its_grant_its_own_directories_and_runs_the_script_as_main(client):
    # GIVEN an emulator whose own environment holds a secret and a variable the runtime inherits
    # WHEN two forked sessions start
    one = invoke_json(client, arn("forked"), new_session_id())
    two = invoke_json(client, arn("forked"), new_session_id())
    # THEN only the basics plus what the runtime grants are visible
    env = one["env"]
    assert "ACR_TEST_SECRET" not in env
    assert env["ACR_TEST_INHERITED"] == SECRET_ENV["ACR_TEST_INHERITED"]
    assert env["GRANTED"] == "yes"
    basics = {"PORT", "PYTHONPATH", "HOME", "TMPDIR", "PATH", "LANG", "LANGUAGE", "TZ"}
    assert set(env) - {"ACR_TEST_INHERITED", "GRANTED", *basics} <= {k for k in env if k.startswith("LC_")}
    assert env["PYTHONPATH"] == str(AGENT_SITE)  # first on the path: the agent site (D53), nothing of the emulator's
    # AND each has its own port, HOME, TMPDIR and working directory
    for key in ("PORT", "HOME", "TMPDIR"):
        assert one["env"][key] != two["env"][key]
    assert one["cwd"] != two["cwd"]
    assert one["cwd"] == str(Path(one["env"]["HOME"]).parent / "work")
    # AND the script ran as __main__ with its own argv, as `python path.py` runs it
    assert one["main"] == "__main__"
    assert one["argv"] == [str(AGENTS / "stdlib_agent.py")]


def test_module_command_runs_the_module_as_main_with_its_arguments(client):
    # GIVEN a runtime whose command is [python, -m, stdlib_agent, --tag, x] in the agents directory
    # WHEN a session starts
    body = invoke_json(client, arn("forked-module"), new_session_id())
    # THEN the module ran as __main__, with argv as `python -m` sets it
    assert body["main"] == "__main__"
    assert body["argv"] == [str(AGENTS / "stdlib_agent.py"), "--tag", "x"]
    assert body["cwd"] == str(AGENTS)


def test_stop_of_a_forked_session_kills_it_after_the_grace_period_and_the_id_starts_fresh(client, session_id):
    # GIVEN a forked agent that ignores SIGTERM (grace period 0.3 s)
    before = invoke_json(client, arn("forked-stubborn"), session_id)
    # WHEN its session is stopped
    started = time.monotonic()
    client.stop_runtime_session(agentRuntimeArn=arn("forked-stubborn"), runtimeSessionId=session_id)
    # THEN it was killed once the grace period ran out, and its directories are gone
    assert time.monotonic() - started >= 0.3
    assert not pid_alive(before["pid"])
    assert not Path(before["env"]["HOME"]).exists()
    # AND the same id gets a new process on the next invoke
    assert invoke_json(client, arn("forked-stubborn"), session_id)["pid"] != before["pid"]


def test_admin_kill_of_a_forked_session_ends_it_as_crashed(client, emulator, session_id):
    # GIVEN a forked session
    pid = invoke_json(client, arn("forked"), session_id)["pid"]
    # WHEN the admin endpoint kills it
    killed = httpx.post(f"{emulator.url}/_admin/sessions/{session_id}/kill", trust_env=False)
    # THEN it is gone and the session ended as a crash
    assert killed.status_code == 200
    assert not pid_alive(pid)
    assert _ended_as(emulator.url, session_id, "crashed")


def test_forked_process_that_dies_by_itself_ends_its_session_as_crashed(client, emulator, session_id):
    # GIVEN a forked session
    pid = invoke_json(client, arn("forked"), session_id)["pid"]
    # WHEN its process dies outside the emulator's control
    os.kill(pid, signal.SIGKILL)
    # THEN the template's exit report ends the session as a crash
    assert wait_for(lambda: _ended_as(emulator.url, session_id, "crashed"))


def test_idle_forked_session_expires(client, emulator, session_id):
    # GIVEN a forked session of a runtime with a 0.8 s idle timeout
    pid = invoke_json(client, arn("forked-idle"), session_id)["pid"]
    # WHEN nothing happens for longer than that
    # THEN the session ends as idle and its process is gone
    assert wait_for(lambda: _ended_as(emulator.url, session_id, "idle_timeout"))
    assert not pid_alive(pid)


def test_broken_preload_module_fails_the_start_with_runtime_client_error_naming_it(client, emulator, session_id):
    # GIVEN a runtime whose preload names a module that does not exist
    # WHEN a session starts
    with pytest.raises(ClientError) as raised:
        invoke_json(client, arn("forked-broken"), session_id)
    # THEN the invoke fails with 424 saying which module could not be imported and why
    error = raised.value.response
    assert (error["Error"]["Code"], error["ResponseMetadata"]["HTTPStatusCode"]) == ("RuntimeClientError", 424)
    assert f"importing preload module '{BROKEN_PRELOAD}' failed: ModuleNotFoundError" in error["Error"]["Message"]
    assert _ended_as(emulator.url, session_id, "startup_failed")


def test_preload_that_starts_a_thread_is_refused_with_runtime_client_error(client, session_id):
    # GIVEN a runtime whose preload module starts a thread at import (a fork would copy it half-way)
    # WHEN a session starts
    with pytest.raises(ClientError) as raised:
        invoke_json(client, arn("forked-threaded"), session_id)
    # THEN the invoke fails with 424 saying why the template refused to fork
    error = raised.value.response
    assert (error["Error"]["Code"], error["ResponseMetadata"]["HTTPStatusCode"]) == ("RuntimeClientError", 424)
    assert "started 1 thread(s) at import" in error["Error"]["Message"]


def test_template_that_dies_is_relaunched_its_sessions_end_as_crashed_and_the_log_says_so(make_client, tmp_path):
    # GIVEN an emulator logging to a file, with a forked session of a runtime whose template is running
    runtime = stdlib_runtime("forked-relaunch", preload=PRELOAD)
    log_file = tmp_path / "emulator.log"
    with start_emulator(EmulatorConfig(runtimes=(runtime,)), log_file=log_file) as emulator:
        client = make_client(emulator.url)
        old_id = new_session_id()
        old = invoke_json(client, runtime.arn, old_id)
        before = fork_server(emulator.url, runtime.arn)
        # WHEN the template is killed
        os.kill(before["pid"], signal.SIGKILL)
        # THEN the session it had forked ends as a crash and its process is gone
        assert wait_for(lambda: _ended_as(emulator.url, old_id, "crashed"))
        assert not pid_alive(old["pid"])
        # AND the next session start launches a new template that serves it
        new = invoke_json(client, runtime.arn, new_session_id())
        after = fork_server(emulator.url, runtime.arn)
    assert after["launches"] == before["launches"] + 1
    assert new["ppid"] == after["pid"] != before["pid"]
    # AND the emulator's log says what happened
    log = log_file.read_text()
    assert f"the fork server of {runtime.arn} exited with code -9" in log
    assert "killed the 1 agent process(es) it had forked; the next session start launches a new one" in log


def test_stopping_the_emulator_leaves_no_forked_process_and_each_session_logged_to_its_own_file(make_client, tmp_path):
    # GIVEN an emulator with a preloading runtime (warm pool of one, agents ignoring SIGTERM) logging to files
    runtime = stdlib_runtime(
        "forked-leaks", "--ignore-sigterm", "--announce", preload=PRELOAD, stop_grace_s=0.2, warm_pool_size=1
    )
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    emulator = start_emulator(EmulatorConfig(runtimes=(runtime,), log_dir=log_dir))
    client = make_client(emulator.url)
    bodies = [invoke_json(client, runtime.arn, new_session_id()) for _ in range(2)]
    template = fork_server(emulator.url, runtime.arn)["pid"]
    # WHEN the emulator gets SIGTERM
    emulator.process.send_signal(signal.SIGTERM)
    emulator.process.wait(timeout=15)
    emulator.stop()
    # THEN no agent process, template or session directory is left
    assert not any(pid_alive(b["pid"]) for b in bodies)
    assert not pid_alive(template)
    assert not any(Path(b["env"]["HOME"]).parent.exists() for b in bodies)
    # AND each agent's stdout went to its own log file
    logs = [p.read_text() for p in log_dir.glob("*.log")]
    for body in bodies:
        assert [log for log in logs if f"agent pid={body['pid']}" in log] == [f"agent pid={body['pid']}\n"]
