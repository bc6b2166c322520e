"""rLLM's runtime and ART's session run small GRPO batches on the real local stack, every terminal status.

trainer -> dispatch queue -> dispatcher -> ACR emulator -> agent (one model call through the gateway session
the framework gave) -> S3 -> completion event -> the adapter's result in the framework's shape. ART is real
(agentcore-rl-toolkit 0.2.0); rLLM's types, its engine's gateway calls and its launcher's trainer come from
tests/stand_ins/rllm (or the real rLLM tree ``AGENTCORE_STAND_INS_RLLM`` names, see the README there).
"""

from __future__ import annotations

import asyncio
import inspect
import os
import subprocess
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
REPO = TESTS.parent
sys.path[:0] = [str(TESTS / "e2e"), str(TESTS / "stand_ins" / "rllm")]
from rllm_tree import REAL, rllm_paths  # noqa: E402

sys.path[:0] = rllm_paths()

from agentcore_rl_toolkit.aws_tools.persistent_dict import NullPersister, PersistentDict  # noqa: E402
from agentcore_rl_toolkit.rollout_session.factory import make_session  # noqa: E402
from e2e_support import AGENT_PRELOAD, EMULATOR_MAX_PAYLOAD  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from rllm.engine.remote_runtime import RemoteRuntimeConfig  # noqa: E402
from rllm.gateway.manager import GatewayManager  # noqa: E402
from rllm.workflows.workflow import TerminationReason  # noqa: E402
from rllm_engine import run_one  # noqa: E402

from local_stack.stack import LocalStack, StackSettings  # noqa: E402
from rollout_contract import META_FIELD, RolloutResult, Status  # noqa: E402
from trainer_client import PollSettings, RolloutClient  # noqa: E402
from trainer_client.backends import rllm as backend_rllm  # noqa: E402
from trainer_client.backends._shared import close_shared_clients  # noqa: E402

pytestmark = pytest.mark.e2e

EXP = "backends"
#: The experiment and model name examples/math_agent/backends/rllm.sh (quoted in the README) runs with.
README_EXP, README_MODEL = "gsm8k-grpo-1", "Qwen/Qwen2.5-1.5B-Instruct"
RLLM_COMMAND = REPO / "examples" / "math_agent" / "backends" / "rllm.sh"
#: What rLLM's rollout engine hands its gateway as the training sessions' sampling parameters.
TRAIN_PARAMS = {"temperature": 0.5, "top_p": 0.9}
CHAT_AGENT = Path(__file__).parent / "agents" / "chat_agent.py"
TOO_BIG = "x" * (EMULATOR_MAX_PAYLOAD + 1024)
ART_BACKEND = {"backend": "trainer_client.backends.art.AgentCoreEventsSession", "experiment": EXP, "timeout_s": 60}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    settings = StackSettings(
        run_dir=tmp_path_factory.mktemp("stack"),
        experiments=(EXP, README_EXP),
        agent_command=(sys.executable, str(CHAT_AGENT)),
        sweep_interval_s=1.0,
        runtime_options={"preload": (*AGENT_PRELOAD, "httpx")},
        emulator_options={"max_payload_bytes": EMULATOR_MAX_PAYLOAD},
        # rLLM's GatewayManager calls the gateway's session and trace routes with no credential (its client has no
        # setting for one), so this stack's gateway is open, as one behind the network isolation alone is (D100).
        gateway_open=True,
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


def _needs_rllms_gateway_client() -> None:
    """Skip under a real rLLM whose ``rllm_model_gateway`` client is PyPI's 0.1.0 (no ``sampling_params``)."""
    from rllm_model_gateway.client import GatewayClient

    if REAL and "sampling_params" not in inspect.signature(GatewayClient.create_session).parameters:
        pytest.skip("real rLLM's GatewayManager needs rLLM's own rllm-model-gateway client, not PyPI's 0.1.0")


def _rllms_gateway(stack: LocalStack) -> GatewayManager:
    """rLLM's GatewayManager on the stack's gateway (ours), its rollout engine's sampling parameters handed over."""
    _needs_rllms_gateway_client()
    host, port = str(stack.gateway_url).removeprefix("http://").split(":")
    gateway = GatewayManager(OmegaConf.create({"rllm": {"gateway": {"host": host, "port": int(port)}}}))
    engine = type("RolloutEngine", (), {"train_sampling_params": TRAIN_PARAMS, "val_sampling_params": {}})()
    gateway.start(engine)
    return gateway


def _only_key(stack: LocalStack, prefix: str, timeout_s: float = 30.0) -> str:
    """The one result key under ``prefix``, once written."""
    (key,) = _keys(stack, prefix, 1, timeout_s)
    return key


def _keys(stack: LocalStack, prefix: str, count: int, timeout_s: float = 30.0, exp: str = EXP) -> list[str]:
    """The ``count`` result keys under ``prefix`` of experiment ``exp``, once written."""
    s3 = boto3.client("s3")
    deadline = time.monotonic() + timeout_s
    while (
        len(
            items := s3.list_objects_v2(Bucket=stack.descriptors[exp].results_bucket, Prefix=prefix).get("Contents", [])
        )
        < count
    ):
        assert time.monotonic() < deadline, f"{len(items)} results under {prefix} after {timeout_s} s, not {count}"
        time.sleep(0.5)
    return [item["Key"] for item in items]


def _stored(stack: LocalStack, key: str, timeout_s: float = 30.0, exp: str = EXP) -> RolloutResult:
    """The stored result at ``key``, once written."""
    s3 = boto3.client("s3")
    bucket = stack.descriptors[exp].results_bucket
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
    gateway = _rllms_gateway(stack)
    runtime.initialize()
    try:
        # WHEN rLLM's engine steps run a group of two samples and one rollout per failure mode
        cancelled = asyncio.ensure_future(run_one(runtime, gateway, {"sleep_s": 60}, "q-cancel", 120))
        outcomes = await asyncio.gather(
            run_one(runtime, gateway, {"reward": 1.0}, "q:1", 60),
            run_one(runtime, gateway, {"reward": 0.25}, "q:1", 60),
            run_one(runtime, gateway, {"action": "raise"}, "q:2", 60),
            run_one(runtime, gateway, {"sleep_s": 60}, "q:3", 3),
            run_one(runtime, gateway, {"blob": TOO_BIG}, "q:4", 60, is_validation=True),
        )
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
    finally:
        runtime.shutdown()
    (ok1, _, traces1), (ok2, _, traces2), (error, error_meta, _), (timeout, _, _), (refused, _, _) = outcomes
    # THEN the group's samples succeed with their rewards, and their model calls were traced under rLLM's sessions
    assert [(r.finished, r.reward, r.termination_reason) for r in (ok1, ok2)] == [
        (True, 1.0, TerminationReason.ENV_DONE),
        (True, 0.25, TerminationReason.ENV_DONE),
    ]
    for result, traces in ((ok1, traces1), (ok2, traces2)):
        (trace,) = traces
        assert trace.session_id == result.session_id and trace.completion_token_ids
        # with the sampling parameters rLLM's engine gave the session, whatever the agent sent
        assert {key: trace.raw_request[key] for key in TRAIN_PARAMS} == TRAIN_PARAMS
        # AND rLLM's engine deleted the session once read
        assert _traces(stack, result.session_id) == []
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


@pytest.mark.skipif(REAL is not None, reason="real rLLM's launcher trains with verl's GPU workers")
def test_the_readme_launcher_runs_rllms_trainer_and_tells_agents_the_model_name(
    stack: LocalStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # GIVEN rLLM's gsm8k_agentcore training split (two rows), and the stack's gateway as rLLM's gateway
    from rllm.data.dataset import DatasetRegistry

    _needs_rllms_gateway_client()
    monkeypatch.setenv("RLLM_HOME", str(tmp_path / "rllm"))
    DatasetRegistry.register_dataset("gsm8k_agentcore", [{"reward": 1.0}, {"reward": 0.5}], "train")
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
        "PYTHONPATH": os.pathsep.join([*rllm_paths(), str(REPO)]),
    }
    host, port = str(stack.gateway_url).removeprefix("http://").split(":")
    # WHEN the README's launcher runs one batch of 2 rows x 2 samples ("$@": where the gateway is, batch sizes)
    done = subprocess.run(
        [
            "bash",
            str(RLLM_COMMAND),
            f"rllm.gateway.host={host}",
            f"rllm.gateway.port={port}",
            "rllm.data.train_batch_size=2",
            "rllm.rollout.n=2",
            f"hydra.run.dir={tmp_path / 'hydra'}",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    # THEN the README's experiment ran the 4 rollouts, and every agent was told the README's model name
    keys = _keys(stack, f"{README_EXP}/", 4, exp=README_EXP)
    stored = [_stored(stack, key, exp=README_EXP) for key in keys]
    assert [result.status for result in stored] == [Status.SUCCEEDED] * 4
    assert {result.payload["_rollout"]["model_id"] for result in stored} == {README_MODEL}


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
