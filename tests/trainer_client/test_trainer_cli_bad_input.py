"""Bad input to the ``rollouts`` commands: one clear line that says what is wrong and what to do, no traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from trainer_client._cli import main

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def _dataset(tmp_path: Path, content: bytes) -> Path:
    path = tmp_path / "in.jsonl"
    path.write_bytes(content)
    return path


def _eval(exp_id: str, dataset: Path, output: Path, *more: str) -> list[str]:
    return ["eval", exp_id, "--dataset", str(dataset), "--output", str(output), "--poll-wait", "1", *more]


@pytest.mark.parametrize(
    ("content", "extra", "message"),
    [
        (b'{"q": "caf\xe9"}\n', [], "in.jsonl:1 is not UTF-8 (byte 0xe9); save the dataset as UTF-8"),
        (b'{"q": 1}\n{"q": NaN}\n', [], "in.jsonl:2 holds NaN, which is not JSON; use a number or null"),
        (b'{"q": Infinity}\n', [], "in.jsonl:1 holds Infinity, which is not JSON"),
        (b'{"q": 1}\n', ["--output-in-missing-dir"], "directory"),
        (b'{"q": 1}\n', ["--journal", "{tmp}/missing/j.jsonl"], "journal"),
        (b'{"q": 1}\n', ["--timeout", "inf"], "--timeout: must be a finite positive number, got inf"),
        (b'{"q": 1}\n', ["--timeout", "nan"], "--timeout: must be a finite positive number, got nan"),
        (b'{"q": 1}\n', ["--timeout", "-1"], "--timeout: must be a finite positive number, got -1"),
        (b'{"q": 1}\n', ["--queue-timeout", "0"], "--queue-timeout: must be a finite positive number, got 0"),
    ],
)
def test_eval_refuses_bad_input_in_one_line_before_anything_is_sent(
    descriptor, backend, tmp_path, capsys, content, extra, message
):
    dataset = _dataset(tmp_path, content)
    output = tmp_path / "out.jsonl"
    if "--output-in-missing-dir" in extra:
        extra, output = [], tmp_path / "missing" / "out.jsonl"
    extra = [arg.replace("{tmp}", str(tmp_path)) for arg in extra]
    with pytest.raises(SystemExit) as exited:
        main(_eval(descriptor.exp_id, dataset, output, *extra))
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err
    assert backend.sqs.receive_message(QueueUrl=descriptor.dispatch_queue_url).get("Messages") is None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _rollouts(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    code = "import sys; from trainer_client._cli import main; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=120, cwd=cwd, check=False
    )


def _bare_env(tmp_path: Path) -> dict[str, str]:
    """No AWS settings at all, as in a fresh shell (no profile files either)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        HOME=str(tmp_path),
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
        AWS_EC2_METADATA_DISABLED="true",
        AWS_MAX_ATTEMPTS="1",
    )
    return env


@pytest.mark.processes
@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({}, 'no AWS region: pass --region or set AWS_DEFAULT_REGION; for the local stack, run `eval "$(rollouts'),
        (
            {"AWS_DEFAULT_REGION": "us-east-1"},
            'no AWS credentials; configure a profile or AWS_* variables, or for the local stack run `eval "$(rollouts',
        ),
        (
            {
                "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_ACCESS_KEY_ID": "x",
                "AWS_SECRET_ACCESS_KEY": "x",
                "AWS_ENDPOINT_URL_SSM": "http://127.0.0.1:{port}",
            },
            "if that is the local stack, it is not running: start it with `rollouts local up`",
        ),
    ],
    ids=["no-environment", "no-credentials", "stopped-local-stack"],
)
def test_status_without_a_usable_environment_says_how_to_set_it(tmp_path, setting, message):
    env = _bare_env(tmp_path)
    env.update({k: v.format(port=_free_port()) for k, v in setting.items()})
    result = _rollouts(["status", "demo"], env, PROJECT_ROOT)
    assert result.returncode == 1
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.processes
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["local", "up", "--run-dir", "/proc/rollouts-cannot-be-here"], "cannot use --run-dir /proc/rollouts"),
        (["demo", "--timeout", "-1"], "--timeout must be a finite positive number of seconds, got -1"),
        (["demo", "--timeout", "inf"], "--timeout must be a finite positive number of seconds, got inf"),
        (["demo", "--output", "{tmp}/missing/out.jsonl"], "directory {tmp}/missing does not exist"),
        (["local", "up", "--sweep-interval", "0"], "sweep_interval_s must be positive, got 0.0"),
        (["local", "up", "--finisher-environments", "0"], "finisher_environments must be at least 1, got 0"),
    ],
)
def test_local_commands_refuse_bad_input_before_starting_anything(tmp_path, args, message):
    run_dir = tmp_path / "run"
    args = [arg.replace("{tmp}", str(tmp_path)) for arg in args]
    if "--run-dir" not in args:
        args = [*args, "--run-dir", str(run_dir)]
    result = _rollouts(args, {**os.environ}, tmp_path)
    assert result.returncode in (1, 2)
    assert message.replace("{tmp}", str(tmp_path)) in result.stderr
    assert "Traceback" not in result.stderr
    assert not (run_dir / "state.json").exists()
    assert not run_dir.exists() or not list(run_dir.glob("*.log"))
