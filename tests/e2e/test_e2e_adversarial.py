"""A policy that attacks the infrastructure, on the real local stack: every attack fails (D101).

A stand-in model answers the coding task with code that tries one attack each (``tests/e2e/attacks.py``): read the
task set, read the agent's environment, write its own result with reward 1.0 through the S3 API, fetch the container
credentials, kill the agent, fork-bomb, fill the disk, open a socket. Through the coding agent, each rollout ends
``succeeded`` with the honest reward (a successful attack would buy 1.0 and print ``LEAKED``), nothing forged is
stored, no credentials are fetched, nothing of the attacks outlives its run, and the next rollout is unaffected.
The same programs run as commands of the sandbox daemon (its task file in the daemon's user's home: the
sandbox's own files are the task's environment, readable by design). Strict isolation needs root (CI runs as
root; elsewhere model-written code runs unconfined, as the agent's user: D101), so without it the module is
skipped.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import boto3
import pytest
from attacks import ATTACKS, CANARY, FILL_PREFIX, HONEST_REWARD, TASK, Targets, marker, model_script
from e2e_support import connect, serving

from agent_app.confinement import SANDBOX_UID
from local_stack.agent_target import target_agent
from local_stack.model_endpoint import EndpointSettings
from local_stack.moto_server import LOCAL_REGION
from local_stack.sandbox import sandbox_settings
from local_stack.stack import PROJECT_ROOT, LocalStack
from rollout_contract.resources import LOCAL_RESULTS_BUCKET
from rollout_contract.results import Status
from trainer_client.sandbox import ExecResult, SandboxClient

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="strict isolation needs root, as CI and the images run (D101)"),
]

EXP = "attacks"
SANDBOX_EXP = "attacksbx"
TASKS_FILE = PROJECT_ROOT / "examples" / "coding_agent" / "tasks.jsonl"
BUCKET = LOCAL_RESULTS_BUCKET


class CredentialsEndpoint(ThreadingHTTPServer):
    """A container credentials endpoint (as ECS and ACR give one) that records who asked."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                endpoint.hits.append(self.path)
                body = json.dumps({"AccessKeyId": "ASIAFAKE", "SecretAccessKey": "leaked", "Token": "t"}).encode()
                self.send_response(200)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}/v2/credentials"


@pytest.fixture(scope="module")
def credentials() -> Iterator[CredentialsEndpoint]:
    endpoint = CredentialsEndpoint()
    thread = threading.Thread(target=endpoint.serve_forever, daemon=True)
    thread.start()
    yield endpoint
    endpoint.shutdown()
    endpoint.server_close()


def targets(credentials: CredentialsEndpoint, exp: str, tasks_file: Path = TASKS_FILE) -> Targets:
    """What an attacker could know of the stack without looking: the task set's path, the bucket's name."""
    return Targets(
        tasks_file=str(tasks_file),
        bucket=BUCKET,
        prefix=f"{exp}/",
        probe_key=f"_forged/{exp}.json",
        credentials=credentials.url,
        credentials_port=credentials.server_address[1],
    )


def sandbox_processes() -> list[int]:
    """The processes of the sandbox user still alive."""
    alive = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue
        uid = next(line.split()[1] for line in text.splitlines() if line.startswith("Uid:"))
        if uid == str(SANDBOX_UID):
            alive.append(int(status.parent.name))
    return alive


def assert_nothing_escaped(stack: LocalStack, credentials: CredentialsEndpoint, exp: str) -> None:
    """No forged object, no credentials fetched, no process of the sandbox user left, no file of the filler."""
    s3 = boto3.client("s3", endpoint_url=stack.moto_url, region_name=LOCAL_REGION)
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=f"_forged/{exp}").get("KeyCount", 0)
    assert listed == 0, "an attack wrote to S3"
    assert credentials.hits == [], "an attack fetched the container credentials"
    assert sandbox_processes() == [], "a process of the attacks outlived its run"
    assert not list(Path("/tmp").glob(f"**/{FILL_PREFIX}*")), "the disk filler's files are on the machine's disk"


@pytest.fixture(scope="module")
def coding(tmp_path_factory: pytest.TempPathFactory, credentials: CredentialsEndpoint) -> Iterator[LocalStack]:
    run_dir = tmp_path_factory.mktemp("attacks")
    agent = target_agent(
        PROJECT_ROOT / "examples" / "coding_agent" / "app.py",
        environment={"CANARY_SECRET": CANARY, "AWS_CONTAINER_CREDENTIALS_FULL_URI": credentials.url},
    )
    script = run_dir / "script.json"
    script.write_text(json.dumps(model_script(targets(credentials, EXP))))
    settings = agent.settings(run_dir=run_dir / "stack", experiments=(EXP,), model=EndpointSettings(script=script))
    with serving(LocalStack(settings)) as stack:
        yield stack


def test_every_attack_through_the_coding_agent_fails_and_the_rollout_keeps_its_honest_reward(
    coding: LocalStack, credentials: CredentialsEndpoint
) -> None:
    with connect(coding, EXP) as client:
        # GIVEN one rollout per attack (the fork bomb alone: its processes count against the sandbox user's limit)
        payloads = {name: {**TASK, "id": name, "prompt": f"{TASK['prompt']}{marker(name)}\n"} for name in ATTACKS}
        together = [name for name in ATTACKS if name != "fork_bomb"]
        # WHEN they run
        items = list(client.run_batch([payloads[n] for n in together], max_concurrent_sessions=4, input_ids=together))
        items += list(client.run_batch([payloads["fork_bomb"]], max_concurrent_sessions=1, input_ids=["fork_bomb"]))
        results = [item.result for item in items if item.result is not None]
        # THEN each ended succeeded with the honest reward: 3 of 4 tests, the attack having bought nothing
        outcomes = {result.input_id: (result.status, result.reward, result.get("tests_passed")) for result in results}
        errors = {result.input_id: result.error for result in results if result.error is not None}
        assert outcomes == {name: (Status.SUCCEEDED, HONEST_REWARD, 3) for name in ATTACKS}, errors
        assert all(result.get("tool_calls") == 1 and result.get("finish") == "answered" for result in results)
        # AND nothing escaped its run: no forged result, no credentials fetched, no process or file left
        assert_nothing_escaped(coding, credentials, EXP)
        # AND the next rollout is unaffected: an honest answer passes its tests as before
        after = client.invoke({**payloads["read_task_file"], "id": "after"}, input_id="after").result()
        assert (after.status, after.reward) == (Status.SUCCEEDED, HONEST_REWARD)


@pytest.fixture(scope="module")
def sandbox_stack(tmp_path_factory: pytest.TempPathFactory, credentials: CredentialsEndpoint) -> Iterator[LocalStack]:
    settings = sandbox_settings(
        run_dir=tmp_path_factory.mktemp("attacks-sandbox"),
        experiments=(SANDBOX_EXP,),
        gateway=False,
        agent_environment={"CANARY_SECRET": CANARY, "AWS_CONTAINER_CREDENTIALS_FULL_URI": credentials.url},
    )
    with serving(LocalStack(settings)) as stack:
        yield stack


def test_every_attack_as_a_sandbox_command_fails_and_the_sandbox_keeps_working(
    sandbox_stack: LocalStack, credentials: CredentialsEndpoint
) -> None:
    client = SandboxClient.for_experiment(SANDBOX_EXP)
    # the daemon's image holds the task's own files, readable by design; what must stay unread is the daemon's user's:
    # a task file in its home
    tasks_file = Path(pwd.getpwuid(os.getuid()).pw_dir) / f"h40b-tasks-{os.getpid()}.jsonl"
    tasks_file.write_text(TASKS_FILE.read_text())
    attacks = targets(credentials, SANDBOX_EXP, tasks_file)
    try:
        python = shutil.which("python3", path=os.path.dirname(sys.executable)) or "python3"
        # GIVEN a sandbox session
        with client.start(input_id="attacks") as sandbox:
            # WHEN each attack runs as a command in it
            for name in ATTACKS:
                result = sandbox.exec([python, "-c", attacks.program(name)], timeout=60)
                # THEN it ran, failed at its attack, and says so
                assert isinstance(result, ExecResult)
                assert result.exit_code == 0 and "LEAKED" not in result.stdout, (name, result.stdout, result.stderr)
            # AND nothing escaped, and the daemon still runs the next command
            assert_nothing_escaped(sandbox_stack, credentials, SANDBOX_EXP)
            after = sandbox.exec(["/bin/sh", "-c", "echo still here"])
            assert isinstance(after, ExecResult) and (after.exit_code, after.stdout) == (0, "still here\n")
    finally:
        tasks_file.unlink()
