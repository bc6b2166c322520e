"""Our ``SandboxClient`` on the local stack's sandbox experiment: the shared budgets and the sweeper's deadline.

ART's client and ours against the same sandbox, command by command, are in ``tests/ml/test_art_sandbox.py``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from e2e_support import HERE, demo_python, serving, wait_until
from iam_support import start_synth, synthesized

from examples.swe_sandbox.loop import run_episode
from examples.swe_sandbox.tasks import TASKS, Task
from local_stack.deployed_policies import DeployedPolicies, audit
from local_stack.moto_server import LOCAL_ACCOUNT_ID, LOCAL_REGION, credentials
from local_stack.sandbox import sandbox_settings
from local_stack.stack import PROJECT_ROOT, LocalStack
from rollout_contract.budgets import SESSION_BUDGET_ID, held_attribute, tps_budget_id
from rollout_contract.resources import (
    BUDGET_PARTITION_KEY,
    BUDGET_TABLE,
    LOCAL_RESULTS_BUCKET,
    ExperimentResources,
    results_bucket_name,
)
from rollout_contract.results import Status
from rollout_contract.sessions import SessionState
from trainer_client.sandbox import SandboxCapacityError, SandboxClient, SandboxEndedError

pytestmark = pytest.mark.e2e

EXP = "sbx-e2e"
SESSIONS = 2


@pytest.fixture(scope="module")
def cdk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """The CDK app with this experiment deployed with ``-c sandbox=true``, synthesized while the tests run."""
    outdir = tmp_path_factory.mktemp("cdk")
    with start_synth(outdir, EXP, sandbox=True) as synth:
        yield synth, outdir
        synth.kill()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, cdk: tuple[subprocess.Popen[str], Path]) -> Iterator[LocalStack]:
    settings = sandbox_settings(
        run_dir=tmp_path_factory.mktemp("sandbox"),
        experiments=(EXP,),
        gateway=False,
        sweep_interval_s=1.0,
        session_budget=SESSIONS,
        record_calls=True,
    )
    with serving(LocalStack(settings)) as running:
        yield running


@pytest.fixture
def client(stack: LocalStack) -> SandboxClient:
    return SandboxClient.for_experiment(EXP, queue_timeout=1)


def item(stack: LocalStack, table: str, key_name: str, key: str) -> dict[str, Any]:
    # the administrator's key: the test's own reads are no trainer's calls
    keys = credentials("admin")
    dynamodb = boto3.client(
        "dynamodb",
        endpoint_url=stack.moto_url,
        region_name=LOCAL_REGION,
        aws_access_key_id=keys["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=keys["AWS_SECRET_ACCESS_KEY"],
    )
    return dynamodb.get_item(TableName=table, Key={key_name: {"S": key}}, ConsistentRead=True).get("Item", {})


def held(stack: LocalStack) -> int:
    budget = item(stack, BUDGET_TABLE.name, BUDGET_PARTITION_KEY, SESSION_BUDGET_ID)
    return int(budget.get(held_attribute(EXP), {"N": "0"})["N"])


def record(stack: LocalStack, session_id: str) -> dict[str, Any]:
    return item(stack, ExperimentResources.for_experiment(EXP).sessions_table.name, "session_id", session_id)


def emulator_session(stack: LocalStack, session_id: str) -> dict[str, Any]:
    """The emulator's view of a session; ``{"state": "stopping"}`` while it is stopped (listed nowhere then)."""
    sessions = httpx.get(f"{stack.emulator_url}/_admin/sessions", timeout=5).json()["sessions"]
    return next((s for s in sessions if s["session_id"] == session_id), {"state": "stopping"})


def test_a_sandbox_holds_a_session_slot_and_spends_invoke_tokens_until_terminated(stack: LocalStack, client):
    # GIVEN a started sandbox
    with client.start(input_id="task-7") as sandbox:
        # THEN it holds a slot of the shared session budget and is recorded running with its deadline
        assert held(stack) == 1
        running = record(stack, sandbox.session_id)
        assert running["state"]["S"] == SessionState.RUNNING and running["input_id"]["S"] == "task-7"
        assert float(running["deadline_at"]["N"]) == pytest.approx(sandbox.deadline_at)
        # AND its calls take tokens of the runtime's invoke budget (the functions' item)
        result = sandbox.exec(["/bin/sh", "-c", "echo $HOME; ls -d $PWD"])
        tps = item(stack, BUDGET_TABLE.name, BUDGET_PARTITION_KEY, tps_budget_id(client.runtime_arn, "DEFAULT"))
        assert float(tps["next_at"]["N"]) > time.time() - 60
        # AND the session runs in a directory of its own
        assert result.exit_code == 0 and "acr-session-" in result.stdout

    # WHEN it is terminated (leaving the block), THEN its session is stopped and its slot freed at once
    assert held(stack) == 0
    finished = record(stack, sandbox.session_id)
    assert (finished["state"]["S"], finished["status"]["S"]) == (SessionState.FINISHED, Status.SUCCEEDED)
    assert emulator_session(stack, sandbox.session_id)["end_reason"] == "stopped"
    with pytest.raises(SandboxEndedError, match="is terminated"):
        sandbox.exec(["true"])


def test_a_sandbox_waits_for_a_free_slot_and_gives_up_after_the_queue_timeout(stack: LocalStack, client):
    # GIVEN every slot of the session budget held by sandboxes
    holders = [client.start() for _ in range(SESSIONS)]
    try:
        # WHEN one more is started, THEN it waits the queue timeout (1 s) and says why it failed
        started = time.monotonic()
        with pytest.raises(SandboxCapacityError, match="no session slot came free"):
            client.start()
        assert time.monotonic() - started >= 1
        # AND once a slot is freed, a start gets it
        holders.pop().terminate()
        holders.append(client.start())
        assert held(stack) == SESSIONS
    finally:
        for sandbox in holders:
            sandbox.terminate()
    assert held(stack) == 0


def test_a_command_past_the_memory_limit_fails_in_its_sandbox(client):
    with client.start() as sandbox:
        result = sandbox.exec([sys.executable, "-c", "bytearray(6 * 2**30)"])
    assert result.exit_code == 1 and "MemoryError" in result.stderr


def test_killing_the_trainer_mid_episode_leaves_no_session_running_past_its_deadline(stack: LocalStack):
    # GIVEN a trainer process with a sandbox (4 s to live) running a 10-minute command
    with subprocess.Popen(
        [sys.executable, str(HERE / "sandbox_trainer.py"), EXP, "4"],
        env={**os.environ, **stack.env},
        stdout=subprocess.PIPE,
        text=True,
    ) as trainer:
        try:
            assert trainer.stdout is not None
            started = json.loads(trainer.stdout.readline())
            assert emulator_session(stack, started["session_id"])["state"] == "active"

            # WHEN the trainer is killed mid-episode (no terminate, no cleanup)
            trainer.send_signal(signal.SIGKILL)
            trainer.wait(timeout=10)
        finally:
            trainer.kill()

    # THEN the sweeper stops the session within a sweep of its deadline, and frees its slot, writing no result
    deadline = started["deadline_at"]
    assert wait_until(lambda: emulator_session(stack, started["session_id"])["state"] == "ended", timeout_s=30)
    ended = emulator_session(stack, started["session_id"])
    assert ended["end_reason"] == "stopped"
    assert time.time() - ended["age_s"] < deadline  # it was running until then
    finished = record(stack, started["session_id"])
    assert (finished["state"]["S"], finished["status"]["S"]) == (SessionState.FINISHED, Status.TIMED_OUT)
    assert float(finished["finished_at"]["N"]) - deadline < 5  # the sweep after the deadline (every 1 s here)
    assert held(stack) == 0


@pytest.mark.parametrize("task", TASKS, ids=[task.task_id for task in TASKS])
def test_each_swe_task_fails_its_tests_until_its_fix_and_only_the_fix_passes(client, task: Task):
    fix, *wrong = task.edits
    with client.start(input_id=task.task_id) as sandbox:
        fixed = run_episode(sandbox, task, lambda task, passing: fix)
    assert fixed.tests_before < 1.0 and fixed.reward == 1.0
    for edit in wrong:
        with client.start(input_id=task.task_id) as sandbox:
            assert run_episode(sandbox, task, lambda task, passing, edit=edit: edit).reward < 1.0


def test_the_readmes_swe_example_runs_grpo_groups_in_sandboxes_on_a_local_stack(stack: LocalStack):
    # WHEN the README's command runs (it starts its own local sandbox stack)
    found = re.search(r"<!-- test: swe-sandbox -->\n```bash\n(.*?)\n```", (PROJECT_ROOT / "README.md").read_text())
    assert found is not None, "README.md lost its tested block swe-sandbox"
    command = found.group(1).split()
    assert command[:3] == [".venv-demo/bin/python", "-m", "examples.swe_sandbox"]
    done = subprocess.run([str(demo_python()), *command[1:]], capture_output=True, text=True, timeout=300,
                          cwd=PROJECT_ROOT)  # fmt: skip
    # THEN each task's group has a reward per episode and their advantages
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == [task.task_id for task in TASKS]
    for line in lines:
        rewards = [float(r) for r in line.split("rewards ")[1].split("  advantages")[0].split()]
        advantages = [float(a) for a in line.split("advantages ")[1].split()]
        assert len(rewards) == len(advantages) == 3 and all(0.0 <= r <= 1.0 for r in rewards)
        assert sum(advantages) == pytest.approx(0.0, abs=0.05)


def test_every_call_of_the_sandbox_trainer_is_allowed_by_the_trainer_role_and_uses_its_sandbox_grants(
    stack: LocalStack, cdk: tuple[subprocess.Popen[str], Path]
):
    # GIVEN every AWS call the module's trainers made (in process and the killed one), and the trainer role CDK
    # synthesizes for a sandbox experiment (-c sandbox=true)
    templates, roles = synthesized(*cdk)
    policies = DeployedPolicies.from_templates(
        templates,
        region=LOCAL_REGION,
        account=LOCAL_ACCOUNT_ID,
        runtime_arn=stack.runtime_arn(EXP),
        renames={results_bucket_name(LOCAL_ACCOUNT_ID, LOCAL_REGION): LOCAL_RESULTS_BUCKET},
    )
    result = audit(
        stack.recorded_calls(),
        policies,
        {name: roles[name] for name in ("trainer", "sweeper")},
        region=LOCAL_REGION,
        account=LOCAL_ACCOUNT_ID,
    )
    # THEN each is allowed (the sweeper's stops of expired sandboxes too)
    assert result.calls["trainer"] > 0 and result.calls["sweeper"] > 0
    findings = [f"{f.component} {f.operation} {f.resource}: {f.why}" for f in result.not_allowed]
    assert not findings, "calls not allowed:\n" + "\n".join(findings)
    # AND every grant the sandbox statements add was used: invoke and stop the runtime, update sandbox items, read
    # and update the two budget items
    runtime = stack.runtime_arn(EXP)
    unused = {(g.action, g.resource) for g in result.unused["trainer"]}
    wanted = {
        ("bedrock-agentcore:InvokeAgentRuntime", runtime),
        ("bedrock-agentcore:StopRuntimeSession", runtime),
        ("dynamodb:UpdateItem", f"arn:aws:dynamodb:{LOCAL_REGION}:{LOCAL_ACCOUNT_ID}:table/{BUDGET_TABLE.name}"),
        ("dynamodb:GetItem", f"arn:aws:dynamodb:{LOCAL_REGION}:{LOCAL_ACCOUNT_ID}:table/{BUDGET_TABLE.name}"),
    }
    assert not wanted & unused, wanted & unused
