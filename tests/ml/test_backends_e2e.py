"""rLLM's runtime and ART's session run small GRPO batches on the real local stack, every terminal status.

trainer -> dispatch queue -> dispatcher -> ACR emulator -> agent (one model call through the gateway session
the framework gave) -> S3 -> completion event -> the adapter's result in the framework's shape. ART is real
(agentcore-rl-toolkit 0.2.0); rLLM's types come from tests/stand_ins/rllm.
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import httpx
import pytest

pytest.importorskip("agentcore_rl_toolkit")

TESTS = Path(__file__).parents[1]
sys.path[:0] = [str(TESTS / "e2e"), str(TESTS / "stand_ins" / "rllm")]

from agentcore_rl_toolkit.aws_tools.persistent_dict import NullPersister, PersistentDict  # noqa: E402
from agentcore_rl_toolkit.rollout_session.factory import make_session  # noqa: E402
from e2e_support import AGENT_PRELOAD, EMULATOR_MAX_PAYLOAD  # noqa: E402
from rllm.engine.remote_runtime import RemoteRuntimeConfig  # noqa: E402
from rllm.workflows.workflow import TerminationReason  # noqa: E402
from rllm_engine import run_one  # noqa: E402

from local_stack.stack import LocalStack, StackSettings  # noqa: E402
from rollout_contract import META_FIELD, RolloutResult, Status  # noqa: E402
from trainer_client import PollSettings, RolloutClient  # noqa: E402
from trainer_client.backends import rllm as backend_rllm  # noqa: E402
from trainer_client.backends._shared import close_shared_clients  # noqa: E402

pytestmark = pytest.mark.e2e

EXP = "backends"
CHAT_AGENT = Path(__file__).parent / "agents" / "chat_agent.py"
TOO_BIG = "x" * (EMULATOR_MAX_PAYLOAD + 1024)
ART_BACKEND = {"backend": "trainer_client.backends.art.AgentCoreEventsSession", "experiment": EXP, "timeout_s": 60}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    settings = StackSettings(
        run_dir=tmp_path_factory.mktemp("stack"),
        experiments=(EXP,),
        agent_command=(sys.executable, str(CHAT_AGENT)),
        sweep_interval_s=1.0,
        runtime_options={"preload": (*AGENT_PRELOAD, "httpx")},
        emulator_options={"max_payload_bytes": EMULATOR_MAX_PAYLOAD},
    )
    with LocalStack(settings) as running, pytest.MonkeyPatch.context() as env:
        for name, value in running.env.items():
            env.setenv(name, value)
        yield running
        close_shared_clients()


def _session_url(stack: LocalStack, session_id: str) -> str:
    return f"{stack.gateway_url}/sessions/{session_id}/v1"


def _traces(stack: LocalStack, session_id: str) -> list[dict]:
    return httpx.get(f"{stack.gateway_url}/sessions/{session_id}/traces", timeout=10).json()


def _only_key(stack: LocalStack, prefix: str, timeout_s: float = 30.0) -> str:
    """The one result key under ``prefix``, once written."""
    s3 = boto3.client("s3")
    deadline = time.monotonic() + timeout_s
    while not (
        items := s3.list_objects_v2(Bucket=stack.descriptors[EXP].results_bucket, Prefix=prefix).get("Contents")
    ):
        assert time.monotonic() < deadline, f"no result under {prefix} after {timeout_s} s"
        time.sleep(0.5)
    (item,) = items
    return item["Key"]


def _stored(stack: LocalStack, key: str, timeout_s: float = 30.0) -> RolloutResult:
    """The stored result at ``key``, once written."""
    s3 = boto3.client("s3")
    bucket = stack.descriptors[EXP].results_bucket
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return RolloutResult.from_json_bytes(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
        except s3.exceptions.NoSuchKey:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


async def test_rllm_runtime_runs_a_grpo_batch_and_returns_rllms_results_for_every_status(stack: LocalStack):
    # GIVEN rLLM's factory with our backend installed, and an rLLM config naming it
    config = RemoteRuntimeConfig(enabled=True, backend=backend_rllm.BACKEND, agentcore={"tps_limit": 25})
    factory = lambda name, **kwargs: RolloutClient.for_experiment(name, poll=PollSettings(wait_time_s=1), **kwargs)  # noqa: E731
    runtime = backend_rllm.AgentCoreEventsRuntime(config, exp_id=EXP, model_id="policy", client_factory=factory)
    runtime.initialize()
    url = lambda sid: _session_url(stack, sid)  # noqa: E731
    try:
        # WHEN rLLM's engine steps run a group of two samples and one rollout per failure mode
        cancelled = asyncio.ensure_future(run_one(runtime, {"sleep_s": 60}, "q-cancel", url, 120))
        outcomes = await asyncio.gather(
            run_one(runtime, {"reward": 1.0}, "q:1", url, 60),
            run_one(runtime, {"reward": 0.25}, "q:1", url, 60),
            run_one(runtime, {"action": "raise"}, "q:2", url, 60),
            run_one(runtime, {"sleep_s": 60}, "q:3", url, 3),
            run_one(runtime, {"blob": TOO_BIG}, "q:4", url, 60),
        )
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
    finally:
        runtime.shutdown()
    (ok1, _), (ok2, _), (error, error_meta), (timeout, _), (refused, _) = outcomes
    # THEN the group's samples succeed with their rewards, and their model calls were traced under rLLM's sessions
    assert [(r.finished, r.reward, r.termination_reason) for r in (ok1, ok2)] == [
        (True, 1.0, TerminationReason.ENV_DONE),
        (True, 0.25, TerminationReason.ENV_DONE),
    ]
    for result in (ok1, ok2):
        assert len(_traces(stack, result.session_id)) == 1
    assert ok1.raw_result["input_id"] == ok2.raw_result["input_id"]
    assert ok1.raw_result["metrics"] == {"model_calls": 1}
    # AND each failure has rLLM's reason, reward 0 and the error fields its engine records
    assert (error.finished, error.reward, error.termination_reason) == (False, 0.0, TerminationReason.ERROR)
    assert error_meta["error"]["status_code"] == 500 and "scripted failure" in error_meta["error"]["traceback"]
    assert (timeout.termination_reason, timeout.metadata["rollout_status"]) == (TerminationReason.TIMEOUT, "timed_out")
    assert (refused.termination_reason, refused.metadata["rollout_status"]) == (
        TerminationReason.ERROR,
        "dispatch_failed",
    )
    assert all(not r.finished and r.reward == 0.0 for r in (timeout, refused))
    # AND the rollout whose execute_tasks rLLM cancelled ends cancelled
    assert _stored(stack, _only_key(stack, f"{EXP}/q-cancel/")).status is Status.CANCELLED


async def test_arts_make_session_runs_its_loops_task_shapes_for_every_status(stack: LocalStack):
    async def art_loop(task_for, *, timeout_s: float = 60, loop_timeout: float = 90):
        """What ART's verl and slime loops do with a session (agent_loop.py, integration/rollout.py)."""
        sid = str(uuid.uuid4())
        state = PersistentDict({"session_id": sid}, persister=NullPersister())
        session = make_session(sid, {**ART_BACKEND, "timeout_s": timeout_s}, state)
        try:
            async with session:
                async with asyncio.timeout(loop_timeout):
                    task = task_for(sid)
                    await session.setup(task)
                    return sid, state, await session.run(task)
        except TimeoutError:
            return sid, state, None

    def verl_task(payload):
        return lambda sid: {
            **payload,
            "_config": {"base_url": _session_url(stack, sid), "model_id": "p", "api_key": sid},
        }

    def grouped_task(payload):
        llm = lambda sid: {"base_url": _session_url(stack, sid), "model": "openai/p", "api_key": sid}  # noqa: E731
        return lambda sid: {"payload": payload, "group_id": "prompt:7", "llm": llm(sid)}

    # WHEN ART's loop runs a group of two (experimental loop's shape) and one rollout per status (verl's shape)
    runs = await asyncio.gather(
        art_loop(grouped_task({"reward": 1.0})),
        art_loop(grouped_task({"reward": 0.0})),
        art_loop(verl_task({"action": "raise"})),
        art_loop(verl_task({"sleep_s": 60}), timeout_s=3),
        art_loop(verl_task({"blob": TOO_BIG})),
        art_loop(verl_task({"sleep_s": 60}), loop_timeout=5),
    )
    (sid1, state1, ok1), (sid2, state2, ok2), (_, _, error), (_, _, timeout), (_, _, refused), cancelled = runs
    # THEN the group's dumps are successful with their rewards, stored under one input_id, traced by the gateway
    assert (ok1.is_successful(), ok1.reward, ok1.task_output["reward"], ok1.metrics) == (
        True,
        1.0,
        1.0,
        {"model_calls": 1.0},
    )
    assert (ok2.is_successful(), ok2.reward) == (True, 0.0)
    assert state1["result_key"].split("/")[1] == state2["result_key"].split("/")[1]
    assert len(_traces(stack, sid1)) == 1 and len(_traces(stack, sid2)) == 1
    # AND every failure is a dump ART's loops score 0, naming the status
    for dump, status in ((error, "agent_error"), (timeout, "timed_out"), (refused, "dispatch_failed")):
        assert not dump.is_successful() and dump.reward is None
        assert f"ended {status}" in dump.failure_reason() and dump.task_output[META_FIELD]["status"] == status
    assert "scripted failure" in error.exception
    # AND a rollout ART's loop gave up on is cancelled by the session's shutdown
    cancelled_sid, cancelled_state, cancelled_dump = cancelled
    assert cancelled_dump is None
    assert _stored(stack, cancelled_state["result_key"]).status is Status.CANCELLED
