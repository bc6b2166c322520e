"""``SandboxClient(runtime_arn=...)`` on a sandbox runtime that is none of our experiments', as ART's client runs.

The runtime is ``agent_app.sandbox.SandboxApp`` behind a ``bedrock-agentcore``-shaped client (the ``agentcore``
seam) that posts to its ``/invocations`` as ACR does with InvokeAgentRuntime.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from agent_app.confinement import Isolation
from agent_app.sandbox import SandboxApp
from rollout_contract.protocol import SESSION_HEADER
from trainer_client.sandbox import SandboxClient

#: Someone's own sandbox runtime, deployed without our stack (its name is not ``rollout_<experiment>``).
ARN = "arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/my_sandbox-Ab12Cd34Ef"


class Runtime:
    """ACR's data plane for one sandbox image: invokes go to the app's ``/invocations``, stops are recorded."""

    def __init__(self, state_dir: Path) -> None:
        self.http = TestClient(SandboxApp(state_dir=state_dir, isolation=Isolation.UNCONFINED)).__enter__()
        self.stopped: list[str] = []
        self.targets: set[tuple[str, str]] = set()

    def invoke_agent_runtime(self, **kwargs: Any) -> dict[str, Any]:
        self.targets.add((kwargs["agentRuntimeArn"], kwargs["qualifier"]))
        response = self.http.post(
            "/invocations", content=kwargs["payload"], headers={SESSION_HEADER: kwargs["runtimeSessionId"]}
        )
        return {"statusCode": response.status_code, "response": io.BytesIO(response.content)}

    def stop_runtime_session(self, **kwargs: Any) -> dict[str, Any]:
        self.stopped.append(kwargs["runtimeSessionId"])
        return {}


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[Runtime]:
    made = Runtime(tmp_path / "records")
    yield made
    made.http.__exit__(None, None, None)


def test_a_runtime_that_is_not_ours_runs_sandboxes_as_in_art_and_says_no_budget_applies(runtime, caplog):
    # GIVEN a client of a sandbox runtime no experiment of ours deployed
    with caplog.at_level(logging.WARNING, logger="trainer_client.sandbox"):
        client = SandboxClient(runtime_arn=ARN, agentcore=runtime)
    # THEN it says that no budget and no sweeper deadline apply, instead of refusing the runtime
    assert not client.budgeted and client.descriptor is None
    assert "none of this project's experiments" in caplog.text and "terminate()" in caplog.text
    # WHEN a sandbox starts, runs a command and is terminated
    with client.start() as sandbox:
        result = sandbox.exec(["/bin/sh", "-c", "echo hello from $0"])
        attached = client.attach(sandbox.session_id)
        assert attached.exec(["/bin/sh", "-c", "echo again"]).stdout == "again\n"
    # THEN the command ran in the runtime, and leaving `with` stopped its session
    assert (result.exit_code, result.stdout) == (0, "hello from /bin/sh\n")
    assert runtime.stopped == [sandbox.session_id]
    assert runtime.targets == {(ARN, "DEFAULT")}
