"""``--agent TARGET``: your own agent on the local stack, and every way it can fail before the stack starts."""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
from pathlib import Path

import boto3
import pytest
from moto import mock_aws
from starlette.testclient import TestClient

from examples.math_agent.local import MATH_DEMO
from local_stack.agent_launcher import AgentTargetError, find_app, parse_target, rollout_app
from local_stack.agent_target import AgentStartError, check_agent, target_agent
from local_stack.cli import STATE_FILE, add_commands
from local_stack.demo import DemoSettings
from local_stack.hosting import LocalAgent
from local_stack.model_endpoint import EndpointSettings
from local_stack.stack import LocalStack, StackSettings
from rollout_contract.protocol import SESSION_HEADER

STOCK_AGENT = """
from bedrock_agentcore.runtime import BedrockAgentCoreApp

app = BedrockAgentCoreApp()

@app.entrypoint
def invoke(payload, context):
    return "hello " + payload["name"] + " from " + context.session_id

if __name__ == "__main__":
    app.run()
"""


def _write(directory: Path, name: str, source: str) -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(source))
    return path


def _cli(*args: str) -> int:
    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers(), MATH_DEMO)
    parsed = parser.parse_args(list(args))
    return int(parsed.func(parsed))


# --- what a target names ----------------------------------------------------------------------------------------


def test_a_file_target_runs_the_launcher_from_its_folder_with_its_folder_as_name(tmp_path: Path) -> None:
    # GIVEN an agent file in a folder named like an ART example
    folder = tmp_path / "strands-math-agent"
    folder.mkdir()
    path = _write(folder, "basic_app.py", STOCK_AGENT)
    # WHEN it is made a local agent, given as a relative path object with --agent-env
    agent = target_agent(os.path.relpath(path), environment={"MODEL": "m"})
    # THEN its sessions run the launcher on the file, start in its folder, get the variable; its runtime name is
    # the folder's, made an ACR name
    assert agent.command == (sys.executable, "-m", "local_stack.agent_launcher", str(path))
    assert (agent.name, agent.working_dir, agent.environment["MODEL"]) == ("strands_math_agent", folder, "m")


def test_a_module_target_is_imported_from_the_current_directory(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    agent = target_agent("my_agents.coding:app")
    assert agent.command[-1] == "my_agents.coding:app"
    assert agent.environment["PYTHONPATH"] == str(tmp_path)
    assert (agent.name, agent.working_dir) == ("my_agents", tmp_path)


def test_a_missing_file_is_named_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(AgentTargetError, match=r"agent file .*nope\.py does not exist"):
        target_agent(tmp_path / "nope.py")
    with pytest.raises(AgentTargetError, match="neither a file nor MODULE:NAME"):
        parse_target("not a module:app")


# --- what the launcher serves -----------------------------------------------------------------------------------


@mock_aws
def test_a_stock_entrypoint_is_served_as_a_rollout_whose_result_is_what_it_returned(tmp_path: Path) -> None:
    # GIVEN a stock BedrockAgentCoreApp (the deployment form: @app.entrypoint returning a string)
    path = _write(tmp_path, "basic_app.py", STOCK_AGENT)
    namespace: dict[str, object] = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    module = type(sys)("basic_app")
    module.__dict__.update(namespace)
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="results")
    # WHEN the launcher finds it and serves it, and a rollout is invoked
    app = rollout_app(find_app(module, None, str(path)), str(path))
    app.s3_client = s3
    session = "s" * 40
    payload = {"name": "ada", "_rollout": {"exp_id": "demo/run-1", "input_id": "q", "s3_bucket": "results"}}
    with TestClient(app) as client:
        answer = client.post("/invocations", content=json.dumps(payload), headers={SESSION_HEADER: session}).json()
        while client.get("/ping").json()["status"] != "Healthy":
            pass
    # THEN it answered at once, ran in the background with its context, and stored its value as the response
    assert answer["result_key"] == f"demo/run-1/q/{session}.json"
    stored = json.loads(s3.get_object(Bucket="results", Key=answer["result_key"])["Body"].read())
    assert stored["response"] == f"hello ada from {session}"
    assert stored["status_code"] == 200


def test_a_module_with_two_apps_asks_which_one(tmp_path: Path) -> None:
    from bedrock_agentcore.runtime import BedrockAgentCoreApp

    module = type(sys)("two")
    module.first, module.second = BedrockAgentCoreApp(), BedrockAgentCoreApp()
    with pytest.raises(AgentTargetError, match=r"several apps \(first, second\); name one: two.py:NAME"):
        find_app(module, None, "two.py")
    assert find_app(module, "second", "two.py") is module.second


# --- the check before the stack starts (real agent processes) ---------------------------------------------------


@pytest.mark.processes
def test_an_agent_file_that_answers_ping_passes_the_check(tmp_path: Path) -> None:
    path = _write(tmp_path, "basic_app.py", STOCK_AGENT)
    check_agent(target_agent(path), run_dir=tmp_path / "run", timeout_s=60)


@pytest.mark.processes
@pytest.mark.parametrize(
    ("source", "said"),
    [
        ("x = 1\n", r"no app in .*agent\.py: it defines no AgentCore app at module level"),
        (
            "import json\n\ndef load():\n    raise RuntimeError('MODEL_URL is not set')\n\nload()\n",
            r"importing it failed:\nTraceback \(most recent call last\):\n  File \".*agent\.py\", line 6, in <module>"
            r"\n    load\(\)\n(.|\n)*RuntimeError: MODEL_URL is not set",
        ),
        (
            "from bedrock_agentcore.runtime import BedrockAgentCoreApp\napp = BedrockAgentCoreApp()\n",
            "has no handler: decorate one with @app.entrypoint",
        ),
    ],
    ids=["no-app", "import-raises", "no-entrypoint"],
)
def test_an_agent_that_cannot_serve_fails_the_check_with_its_reason(tmp_path: Path, source: str, said: str) -> None:
    path = _write(tmp_path, "agent.py", source)
    with pytest.raises(AgentStartError, match=said):
        check_agent(target_agent(path), run_dir=tmp_path / "run", timeout_s=60)


@pytest.mark.processes
def test_an_agent_that_never_answers_ping_fails_the_check_at_its_limit(tmp_path: Path) -> None:
    path = _write(tmp_path, "slow.py", "import time\ntime.sleep(600)\n")
    with pytest.raises(AgentStartError, match=r"did not answer GET /ping on its PORT within 2 s"):
        check_agent(target_agent(path), run_dir=tmp_path / "run", timeout_s=2)


@pytest.mark.processes
def test_local_up_with_a_broken_agent_says_why_and_starts_nothing(tmp_path: Path, capsys) -> None:
    # GIVEN an agent whose import raises
    path = _write(tmp_path, "agent.py", "raise ImportError('no module named strands_tools')\n")
    run_dir = tmp_path / "run"
    # WHEN `rollouts local up --agent` is asked to host it
    code = _cli("local", "up", "--agent", str(path), "--run-dir", str(run_dir))
    # THEN it fails with the agent's traceback, and no stack was started or recorded
    err = capsys.readouterr().err
    assert code == 1
    assert "ImportError: no module named strands_tools" in err and "nothing was started" in err
    assert not (run_dir / STATE_FILE).exists()
    assert not (run_dir / "moto.log").exists()


def test_local_up_with_a_missing_agent_file_says_so(tmp_path: Path, capsys) -> None:
    code = _cli("local", "up", "--agent", str(tmp_path / "app.py"), "--run-dir", str(tmp_path / "run"))
    assert code == 1
    assert "agent file" in capsys.readouterr().err


def test_agent_options_without_an_agent_are_refused(tmp_path: Path, capsys) -> None:
    assert _cli("demo", "--agent-env", "K=V", "--run-dir", str(tmp_path)) == 1
    assert "--agent-env need --agent TARGET" in capsys.readouterr().err


def test_demo_with_an_agent_but_no_dataset_is_refused_before_the_agent_is_started(tmp_path: Path, capsys) -> None:
    path = _write(tmp_path, "app.py", STOCK_AGENT)
    assert _cli("demo", "--agent", str(path), "--run-dir", str(tmp_path / "run")) == 2
    err = capsys.readouterr().err
    assert "--agent needs --dataset FILE" in err and "checking the agent" not in err


# --- paths as str or PathLike -----------------------------------------------------------------------------------


class _FsPath:
    """An ``os.PathLike`` that is not a ``pathlib.Path`` (as a user's own path type would be)."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __fspath__(self) -> str:
        return self.path


@pytest.mark.parametrize("kind", [str, _FsPath], ids=["str", "PathLike"])
def test_stack_agent_model_and_demo_settings_take_paths_as_str_or_pathlike(tmp_path: Path, kind) -> None:
    # GIVEN every path of the public settings given as `kind` (LocalStack used to fail on a str run_dir:
    # 'str' object has no attribute 'resolve')
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"conversations": [{"match": "x", "answers": [[{"content": "y"}]]}]}))
    agent_file = _write(tmp_path, "app.py", STOCK_AGENT)
    # WHEN a stack, an agent, the model's and the demo's settings are made from them
    settings = StackSettings(
        run_dir=kind(tmp_path / "run"),
        emulator=False,
        extra_pythonpath=(kind(tmp_path),),
        agent_working_dir=kind(tmp_path / "work"),
    )
    stack = LocalStack(settings)
    agent = LocalAgent(name="mine", command=("python", "app.py"), working_dir=kind(tmp_path))
    targeted = target_agent(kind(agent_file), working_dir=kind(tmp_path / "work"))
    model = EndpointSettings(script=kind(script))
    demo = DemoSettings(run_dir=kind(tmp_path / "demo"), output=kind(tmp_path / "out.jsonl"), model_script=kind(script))
    # THEN they hold paths
    assert stack.run_dir == (tmp_path / "run").resolve()
    assert (settings.extra_pythonpath, settings.agent_working_dir) == ((tmp_path,), tmp_path / "work")
    assert (agent.working_dir, targeted.working_dir, model.script) == (tmp_path, tmp_path / "work", script)
    assert (demo.run_dir, demo.output, demo.model_script) == (tmp_path / "demo", tmp_path / "out.jsonl", script)
