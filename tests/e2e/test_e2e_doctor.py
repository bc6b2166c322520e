"""``rollouts doctor`` on the real local stack: a healthy run passes, and each broken piece fails its own line.

One stack (experiment ``demo``, the scripted agent) serves every test; each test breaks one piece through the
same AWS APIs an operator would touch, checks the exact line that names it, and restores the piece.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import boto3
import pytest
from e2e_support import scripted_stack

from local_stack.stack import LocalStack
from rollout_contract.resources import ExperimentResources
from trainer_client._cli import main as rollouts

pytestmark = pytest.mark.e2e

EXP = "demo"
NAMES = ExperimentResources.for_experiment(EXP)
HOPS = ("queued", "dispatched", "invoked", "result written", "event received", "future resolved")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """A local stack for experiment ``demo``, its environment set for this module's clients."""
    with scripted_stack(tmp_path_factory.mktemp("doctor"), EXP) as running, pytest.MonkeyPatch.context() as env:
        for name, value in running.env.items():
            env.setenv(name, value)
        yield running


def _doctor(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str]]:
    """Run ``rollouts doctor demo ARGS`` in this process; return its exit status and report lines."""
    capsys.readouterr()
    status = rollouts(["doctor", EXP, *args])
    return status, capsys.readouterr().out.splitlines()


def _line(lines: list[str], name: str) -> str:
    """The one report line of check ``name``."""
    (line,) = [line for line in lines if line[6:].startswith(f"{name} ")]
    return line


def _failures(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("FAIL")]


@contextmanager
def _queue_attribute(queue: str, name: str, value: str) -> Iterator[None]:
    sqs = boto3.client("sqs")
    url = sqs.get_queue_url(QueueName=queue)["QueueUrl"]
    before = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[name])["Attributes"][name]
    sqs.set_queue_attributes(QueueUrl=url, Attributes={name: value})
    try:
        yield
    finally:
        sqs.set_queue_attributes(QueueUrl=url, Attributes={name: before})


def test_a_healthy_stack_passes_every_check_and_traces_a_canary_hop_by_hop(stack: LocalStack, tmp_path: Path) -> None:
    # GIVEN a healthy local stack and a canary payload the agent succeeds on
    payload = tmp_path / "canary.json"
    payload.write_text(json.dumps({"action": "succeed", "reward": 1.0}))
    # WHEN an operator runs the installed command
    command = [str(Path(sys.executable).with_name("rollouts")), "doctor", EXP, "--canary", str(payload)]
    done = subprocess.run(
        command, env={**os.environ, **stack.env}, capture_output=True, text=True, timeout=180, check=False
    )
    lines = done.stdout.splitlines()
    # THEN it exits 0 and every line passes: each check in hop order, then each canary hop with its latency
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    assert _failures(lines) == [] and all(line.startswith("PASS") for line in lines)
    checks = [line[6:32].strip() for line in lines]
    assert checks[:3] == ["descriptor", "queue dispatch", "queue completion"]
    assert checks.index("result rule") < checks.index("runtime") < checks.index("function dispatcher")
    assert checks[-len(HOPS) :] == [f"canary {hop}" for hop in HOPS]
    for hop in ("dispatched", "invoked", "event received", "future resolved"):
        assert " ms)" in _line(lines, f"canary {hop}") or " s)" in _line(lines, f"canary {hop}")
    assert "is READY" in _line(lines, "runtime")
    assert "sends object events to EventBridge" in _line(lines, "bucket events")
    assert ": 0 errors, 0 throttles, " in _line(lines, "function dispatcher")
    assert "quota unknown (the local stack has no Service Quotas)" in _line(lines, "quotas")


def test_a_disabled_rule_fails_the_result_rule_line(stack: LocalStack, capsys: pytest.CaptureFixture[str]) -> None:
    events = boto3.client("events")
    # GIVEN the result rule disabled
    events.disable_rule(Name=NAMES.result_rule_name)
    try:
        # WHEN the doctor runs
        status, lines = _doctor(capsys)
    finally:
        events.enable_rule(Name=NAMES.result_rule_name)
    # THEN it exits 1 and exactly the rule's line fails, saying how to enable it
    assert status == 1
    assert _failures(lines) == [_line(lines, "result rule")]
    assert _line(lines, "result rule") == (
        f"FAIL  result rule                {NAMES.result_rule_name} is DISABLED: no result event reaches the trainer "
        f"or the finisher -> enable it: aws events enable-rule --name {NAMES.result_rule_name}"
    )


def test_a_removed_queue_policy_fails_that_queues_policy_line(
    stack: LocalStack, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN the completion queue without the policy that lets EventBridge send to it
    with _queue_attribute(NAMES.completion_queue.name, "Policy", ""):
        # WHEN the doctor runs
        status, lines = _doctor(capsys)
    # THEN exactly the completion queue's policy line fails, naming the queue and the rule
    assert status == 1
    assert _failures(lines) == [_line(lines, "queue policy completion")]
    assert _line(lines, "queue policy completion").startswith(
        f"FAIL  queue policy completion    no statement of {NAMES.completion_queue.name}'s policy lets "
        f"events.amazonaws.com (rule {NAMES.result_rule_name}) sqs:SendMessage"
    )
    assert _line(lines, "queue policy finisher").startswith("PASS")


def test_a_runtime_the_control_plane_does_not_know_fails_the_runtime_line(
    stack: LocalStack, capsys: pytest.CaptureFixture[str]
) -> None:
    ssm = boto3.client("ssm")
    original = stack.descriptors[EXP]
    unknown = original.runtime_arn.rpartition("/")[0] + "/rollout_gone-0000000000"
    # GIVEN a descriptor naming a runtime that does not exist (deleted, or another account's)
    ssm.put_parameter(
        Name=NAMES.descriptor_parameter,
        Value=original.model_copy(update={"runtime_arn": unknown}).model_dump_json(),
        Type="String",
        Overwrite=True,
    )
    try:
        # WHEN the doctor runs
        status, lines = _doctor(capsys)
    finally:
        ssm.put_parameter(
            Name=NAMES.descriptor_parameter, Value=original.model_dump_json(), Type="String", Overwrite=True
        )
    # THEN the control plane's answer fails the runtime line, with what to do
    assert status == 1
    assert _failures(lines) == [_line(lines, "runtime")]
    assert _line(lines, "runtime").startswith(f"FAIL  runtime                    {unknown} not found: ")
    assert _line(lines, "runtime").endswith("-> restart the local stack: rollouts local down && rollouts local up")


def test_a_message_in_a_dead_letter_queue_fails_that_queues_dead_letter_line(
    stack: LocalStack, capsys: pytest.CaptureFixture[str]
) -> None:
    sqs = boto3.client("sqs")
    dlq = sqs.get_queue_url(QueueName=NAMES.finisher_queue.dlq_name)["QueueUrl"]
    # GIVEN a message the finisher gave up on
    sqs.send_message(QueueUrl=dlq, MessageBody=json.dumps({"detail": "a result event the finisher failed on"}))
    try:
        # WHEN the doctor runs
        status, lines = _doctor(capsys)
    finally:
        for message in sqs.receive_message(QueueUrl=dlq, MaxNumberOfMessages=10).get("Messages", []):
            sqs.delete_message(QueueUrl=dlq, ReceiptHandle=message["ReceiptHandle"])
    # THEN exactly the finisher's dead-letter line fails, with the count and how to read and move them
    assert status == 1
    assert _failures(lines) == [_line(lines, "dead letters finisher")]
    line = _line(lines, "dead letters finisher")
    assert line.startswith(
        f"FAIL  dead letters finisher      1 message(s) in {NAMES.finisher_queue.dlq_name} -> read them"
    )
    assert "start-message-move-task" in line


def test_an_agent_that_never_writes_fails_the_canary_at_result_written(
    stack: LocalStack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a canary whose agent runs far past the canary's 5 s deadline
    payload = tmp_path / "hangs.json"
    payload.write_text(json.dumps({"action": "succeed", "sleep_s": 600}))
    # WHEN the doctor traces it
    status, lines = _doctor(capsys, "--canary", str(payload), "--timeout", "5")
    # THEN every check passes, the canary passes queued, dispatched and invoked, and fails at "result written"
    assert status == 1
    assert _failures(lines) == [_line(lines, "canary result written")]
    assert [line[6:32].strip() for line in lines[-4:]] == [f"canary {hop}" for hop in HOPS[:4]]
    assert _line(lines, "canary result written") == (
        "FAIL  canary result written      the agent wrote no result within the 5 s deadline (the sweeper ended the "
        "rollout as timed_out) -> read the agent's logs: its handler must return or raise before the deadline"
    )


def test_a_missing_descriptor_is_the_only_line_and_says_how_to_create_it(
    stack: LocalStack, capsys: pytest.CaptureFixture[str]
) -> None:
    # WHEN the doctor runs for an experiment nobody deployed
    capsys.readouterr()
    status = rollouts(["doctor", "never-deployed"])
    lines = capsys.readouterr().out.splitlines()
    # THEN one failing line says so and how to deploy it
    assert status == 1
    assert lines == [
        "FAIL  descriptor                 no SSM parameter /agentcore-rollouts/experiments/never-deployed -> deploy: "
        "npx cdk deploy -c experiment=never-deployed, or start the local stack: rollouts local up"
    ]
