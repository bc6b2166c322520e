"""ART 0.2.0's unmodified ``SandboxClient`` drives our sandbox daemon (``agent_app.sandbox``) on the local emulator.

One local stack hosts the sandbox experiment (``local_stack.sandbox.sandbox_settings``). Every case runs through
ART's client and through ours (``trainer_client.sandbox``), which keeps ART's names and semantics: the same
commands give the same results and raise the same errors. Where the two differ by design (ours refuses a bad
argument before sending it; ART's sends it and the daemon refuses it), the test says so.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agentcore_rl_toolkit")

sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))

import httpx  # noqa: E402
from agentcore_rl_toolkit.sandbox import SandboxClient as ArtSandboxClient  # noqa: E402
from agentcore_rl_toolkit.sandbox import client as art  # noqa: E402
from e2e_support import serving  # noqa: E402

from agent_app.confinement import ISOLATION_ENV, Isolation  # noqa: E402
from local_stack.sandbox import sandbox_settings  # noqa: E402
from local_stack.stack import LocalStack  # noqa: E402
from rollout_contract.sandbox import OUTPUT_LIMIT_BYTES  # noqa: E402
from trainer_client import sandbox as ours  # noqa: E402

pytestmark = pytest.mark.e2e

EXP = "artsbx"
#: Each client's module, for its errors (the same names in both).
ERRORS = {"art": art, "ours": ours}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    # Unconfined, as ART's daemon runs commands: the cases share files with them through the test's tmp_path
    # (the confined daemon is tested in tests/e2e/test_e2e_adversarial.py).
    settings = sandbox_settings(
        run_dir=tmp_path_factory.mktemp("art-sandbox"),
        experiments=(EXP,),
        gateway=False,
        sweep_interval_s=1.0,
        agent_environment={ISOLATION_ENV: Isolation.UNCONFINED.value},
    )
    with serving(LocalStack(settings)) as running:
        yield running


def new_client(stack: LocalStack, kind: str) -> Any:
    if kind == "art":
        return ArtSandboxClient(runtime_arn=stack.descriptors[EXP].runtime_arn)
    return ours.SandboxClient.for_experiment(EXP)


@pytest.fixture(scope="module", params=list(ERRORS))
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def sandbox(stack: LocalStack, kind: str) -> Iterator[Any]:
    """One sandbox per client for the module's cases (each case its own directory in it)."""
    with new_client(stack, kind).start() as started:
        yield started


def sh(script: str) -> list[str]:
    return ["/bin/sh", "-c", script]


def test_a_foreground_command_returns_its_output_in_its_directory_and_environment(sandbox, tmp_path: Path):
    result = sandbox.exec(sh('printf "$GREETING"; pwd >&2'), cwd=str(tmp_path), env={"GREETING": "hi"})

    assert (result.exit_code, result.stdout, result.stderr) == (0, "hi", f"{tmp_path}\n")
    assert not (result.timed_out or result.stdout_truncated or result.stderr_truncated)


def test_a_nonzero_exit_is_a_result_not_an_error(sandbox):
    result = sandbox.exec(sh("echo failing >&2; exit 3"))

    assert (result.exit_code, result.stderr, result.timed_out) == (3, "failing\n", False)


def test_a_background_command_is_got_by_its_id_while_running_and_when_done(sandbox, tmp_path: Path):
    # GIVEN a background command that waits for a file
    gate = tmp_path / "gate"
    handle = sandbox.exec(sh(f"while [ ! -e {gate} ]; do sleep 0.05; done; echo done"), background=True)

    # THEN a handle got by its id sees it running, and waiting with a timeout ends without stopping it
    again = sandbox.get_exec(handle.invocation_id)
    assert again.status() == "in_progress"
    with pytest.raises(TimeoutError, match="still running"):
        again.result(timeout=0.3)

    # WHEN the file appears, THEN both handles get its result
    gate.touch()
    assert again.result(timeout=30).stdout == "done\n"
    assert handle.status() == "completed" and handle.result().stdout == "done\n"


def test_a_command_past_its_timeout_raises_with_its_partial_output(sandbox, kind: str):
    with pytest.raises(ERRORS[kind].ExecTimeoutError) as raised:
        sandbox.exec(sh("echo partial; sleep 30"), timeout=1)

    result = raised.value.result
    assert (result.timed_out, result.exit_code, result.stdout) == (True, -1, "partial\n")
    # AND reading it again raises the same, from the stored result
    with pytest.raises(ERRORS[kind].ExecTimeoutError):
        raised.value.handle.result()


def test_each_stream_keeps_its_first_256_kib_and_says_it_was_cut(sandbox):
    script = f"import sys; sys.stdout.write('x' * {OUTPUT_LIMIT_BYTES + 1000}); sys.stderr.write('y' * 10)"

    result = sandbox.exec([sys.executable, "-c", script])

    assert OUTPUT_LIMIT_BYTES == 256 * 1024
    assert (len(result.stdout), result.stdout_truncated) == (OUTPUT_LIMIT_BYTES, True)
    assert (result.stderr, result.stderr_truncated) == ("y" * 10, False)


def test_a_repeated_invocation_id_returns_the_first_result_and_runs_nothing_new(sandbox, tmp_path: Path):
    invocation_id = f"task.{uuid.uuid4().hex}"
    first = sandbox.exec(["echo", "first"], invocation_id=invocation_id)

    again = sandbox.exec(["touch", str(tmp_path / "ran")], invocation_id=invocation_id)

    assert first.stdout == again.stdout == "first\n"
    assert not (tmp_path / "ran").exists()


def test_a_command_that_cannot_run_fails_with_execution_failed(sandbox, kind: str, tmp_path: Path):
    error = ERRORS[kind].ExecError
    with pytest.raises(error, match="execution_failed"):
        sandbox.exec(["/no/such/executable"])
    with pytest.raises(error, match="execution_failed"):
        sandbox.exec(["true"], cwd=str(tmp_path / "missing"))


def test_an_unknown_invocation_id_is_not_found(sandbox, kind: str):
    handle = sandbox.get_exec(f"never.{uuid.uuid4().hex}")

    assert handle.status() == "not_found"
    with pytest.raises(ERRORS[kind].ExecError, match="not_found"):
        handle.result()


@pytest.mark.parametrize(
    "fields",
    [{"timeout": 0}, {"timeout": 3601}, {"env": {"A=B": "x"}}, {"command": []}],
    ids=["timeout-0", "timeout-3601", "env-name-with-equals", "empty-command"],
)
def test_a_bad_request_is_refused(sandbox, kind: str, fields: dict[str, Any]):
    fields = dict(fields)
    command = fields.pop("command", ["true"])
    if kind == "art":
        # ART's client sends it; the daemon refuses it (400), which ACR answers as 424 RuntimeClientError
        with pytest.raises(art.ExecError) as raised:
            sandbox.exec(command, **fields)
        assert "RuntimeClientError" in repr(raised.value.__cause__)
    else:
        # ours refuses it before anything is sent, naming the field
        with pytest.raises(ValueError, match="timeout|env|command"):
            sandbox.exec(command, **fields)
    assert sandbox.exec(["true"]).exit_code == 0  # the sandbox serves on


def test_terminate_stops_the_session_and_the_handle(stack: LocalStack, kind: str):
    with new_client(stack, kind).start() as sandbox:
        assert sandbox.exec(["true"]).exit_code == 0

    sessions = httpx.get(f"{stack.emulator_url}/_admin/sessions", timeout=5).json()["sessions"]
    session = next(s for s in sessions if s["session_id"] == sandbox.session_id)
    assert (session["state"], session["end_reason"]) == ("ended", "stopped")
    with pytest.raises(RuntimeError, match="terminated"):
        sandbox.exec(["true"])
