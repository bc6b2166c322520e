"""The rLLM remote runtime on moto: rLLM's engine steps drive it, a scripted backend plays dispatcher + agent.

rLLM is not on PyPI: its types come from tests/stand_ins/rllm, or from a real rLLM tree named by
``AGENTCORE_STAND_INS_RLLM`` (see the README there).
"""

from __future__ import annotations

import asyncio
import functools
import os
import subprocess
import sys
import threading
import types
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "stand_ins" / "rllm"))
from rllm_tree import rllm_paths  # noqa: E402

sys.path[:0] = rllm_paths()
import rllm.engine.remote_runtime as remote_runtime  # noqa: E402
from rllm.engine.remote_runtime import RemoteRuntimeConfig, TaskSubmission  # noqa: E402
from rllm.workflows.workflow import TerminationReason  # noqa: E402
from rllm_engine import SessionUrls, run_one  # noqa: E402
from trainer_support import FAST_POLL, RUNTIME_ARN, Backend  # noqa: E402

from rollout_contract import STATUS_CODES, CancelRequest, DispatchRequest, ErrorInfo, ResultKey, Status, Timings  # noqa: E402
from trainer_client import ClientResult, RolloutClient  # noqa: E402
from trainer_client.backends import rllm as backend_rllm  # noqa: E402

EXP = "exp-test"
GATEWAY = SessionUrls("http://gateway.test:9000")


def _config(**agentcore: object) -> RemoteRuntimeConfig:
    return RemoteRuntimeConfig(
        enabled=True, backend=backend_rllm.BACKEND, agentcore=dict(agentcore), session_timeout=60
    )


def _runtime(**agentcore: object) -> backend_rllm.AgentCoreEventsRuntime:
    factory = functools.partial(RolloutClient.for_experiment, poll=FAST_POLL)
    return backend_rllm.AgentCoreEventsRuntime(
        _config(**agentcore), exp_id=EXP, model_id="policy-7b", client_factory=factory
    )


def _session_url(session_id: str) -> str:
    return GATEWAY.get_session_url(session_id)


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """``install()`` with everything it changes restored afterwards."""
    monkeypatch.setattr(remote_runtime, "create_remote_runtime", remote_runtime.create_remote_runtime)
    for name in ("RAY_RUNTIME_ENV_HOOK", backend_rllm._PREVIOUS_RUNTIME_ENV_HOOK):
        monkeypatch.delenv(name, raising=False)
    backend_rllm.install()


async def test_an_rllm_grpo_batch_ends_with_one_result_per_rollout_in_rllms_shapes(descriptor, backend: Backend):
    # GIVEN the runtime, and two rLLM tasks x 2 samples whose agents end in every terminal status
    runtime = _runtime()
    runtime.initialize()
    ends = {
        ("q:1", 0): {"end_as": "succeeded", "reward": 0.5},
        ("q:1", 1): {"end_as": "agent_error"},
        ("q:2", 0): {"end_as": "timed_out"},
        ("q:2", 1): {"end_as": "cancelled"},
        ("q:3", 0): {"end_as": "dispatch_failed"},
    }
    serving = backend.serve_in_thread(len(ends))
    try:
        # WHEN rLLM's engine steps run them concurrently, each through execute_tasks([one submission])
        outcomes = await asyncio.gather(
            *(run_one(runtime, GATEWAY, task, task_id, 60) for (task_id, _), task in ends.items())
        )
    finally:
        serving.join(timeout=30)
        runtime.shutdown()
    outcomes = [(result, metadata) for result, metadata, _ in outcomes]
    results = dict(zip(ends, outcomes, strict=True))
    # THEN rLLM's session ids, inference URLs and model name reach the rollouts; each task id is one group
    requests = {request.session_id: request for request in backend.requests}
    for result, _ in outcomes:
        request = requests[result.session_id]
        assert request.rollout["base_url"] == _session_url(result.session_id)
        assert request.rollout["model_id"] == "policy-7b"
    assert sorted(map(str, (request.payload for request in requests.values()))) == sorted(map(str, ends.values()))
    group_of = {result.task_id: requests[result.session_id].input_id for result, _ in outcomes}
    assert len({requests[r.session_id].input_id for r, _ in outcomes if r.task_id == "q:1"}) == 1
    assert len(set(group_of.values())) == 3 and all(":" not in input_id for input_id in group_of.values())
    # AND each status has rLLM's meaning
    ok, ok_meta = results[("q:1", 0)]
    assert (ok.finished, ok.reward, ok.termination_reason) == (True, 0.5, TerminationReason.ENV_DONE)
    assert ok_meta["rollout_status"] == "succeeded" and "error" not in ok_meta
    assert ok.raw_result["rewards"] == [0.5] and ok.raw_result["status_code"] == 200
    failed = {key: results[key] for key in ends if key != ("q:1", 0)}
    for (result, meta), status, reason in zip(
        failed.values(),
        ("agent_error", "timed_out", "cancelled", "dispatch_failed"),
        (TerminationReason.ERROR, TerminationReason.TIMEOUT, TerminationReason.ERROR, TerminationReason.ERROR),
        strict=True,
    ):
        assert (result.finished, result.reward, result.termination_reason) == (False, 0.0, reason)
        assert meta["rollout_status"] == status and status in result.error
        assert meta["error"]["status_code"] == STATUS_CODES[Status(status)]
        assert meta["error"]["stop_reason"]
    assert "boom" in results[("q:1", 1)][0].error


def test_agent_error_carries_its_traceback_where_rllm_reads_it():
    # GIVEN an agent_error result with a traceback
    key = ResultKey(EXP, "g", "s" * 36)
    error = ErrorInfo(type="KeyError", message="'answer'", traceback="Traceback ...\nKeyError: 'answer'")
    result = ClientResult.terminal(Status.AGENT_ERROR, key=key, s3_bucket="b", error=error)
    # WHEN it is turned into rLLM's result
    sub = TaskSubmission(task={}, session_id=key.session_id, task_id="g", inference_url="u")
    task_result = backend_rllm.to_task_result(sub, result, elapsed=2.5)
    # THEN rLLM's engine finds status_code, stop_reason and traceback at the top of raw_result
    assert task_result.raw_result["traceback"].endswith("KeyError: 'answer'")
    assert task_result.raw_result["status_code"] == 500 and task_result.raw_result["stop_reason"] == "'answer'"
    assert task_result.elapsed == 2.5 and task_result.metadata["rollout_result_key"] == str(key)


def test_an_unmodified_art_agents_documents_become_rllms_results():
    # GIVEN what ART 0.2.0's agent stores for a success and for a failure (no status, none of our fields)
    key = ResultKey(EXP, "g", "s" * 36)
    metadata = {"input_id": "g", "s3_bucket": "b", "result_key": str(key), "payload": {}}
    ok = ClientResult({"rewards": [0.25], "status_code": 200, "stop_reason": "end_turn", **metadata})
    failure = {"status_code": 500, "stop_reason": "'answer'", "traceback": "KeyError: 'answer'\n"}
    failed = ClientResult({**failure, **metadata})
    sub = TaskSubmission(task={}, session_id=key.session_id, task_id="g", inference_url="u")

    # WHEN they become rLLM's results THEN the status comes from ART's fields, the document rides along as is
    done, error = (backend_rllm.to_task_result(sub, result, 1.0) for result in (ok, failed))
    assert (done.finished, done.reward, done.termination_reason) == (True, 0.25, TerminationReason.ENV_DONE)
    assert (error.finished, error.termination_reason) == (False, TerminationReason.ERROR)
    assert error.raw_result == dict(failed) and "agent_error" in error.error


@pytest.mark.parametrize(
    ("agent_says", "reason"),
    [
        ("max_turns_exceeded", TerminationReason.MAX_TURNS_EXCEEDED),
        ("bogus", TerminationReason.ENV_DONE),
        (3, TerminationReason.ENV_DONE),
    ],
)
def test_a_succeeded_agent_may_name_rllms_termination_reason(agent_says, reason):
    key = ResultKey(EXP, "g", "s" * 36)
    output = {"termination_reason": agent_says}
    result = ClientResult.from_handler_output(output, key=key, s3_bucket="b", payload=None, timings=Timings())
    sub = TaskSubmission(task={}, session_id=key.session_id, task_id="g", inference_url="u")
    assert backend_rllm.to_task_result(sub, result, 1.0).termination_reason is reason


async def test_cancelling_execute_tasks_cancels_the_rollout(descriptor, backend: Backend):
    # GIVEN a rollout in flight (nobody completes it)
    runtime = _runtime()
    runtime.initialize()
    sub = TaskSubmission(task={"q": 1}, session_id="c" * 36, task_id="q", inference_url=_session_url("c" * 36))
    task = asyncio.ensure_future(runtime.execute_tasks([sub], timeout=60))
    try:
        (request,) = await asyncio.to_thread(backend.receive, 1)
        assert isinstance(request, DispatchRequest)
        # WHEN rLLM cancels the call
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # THEN a cancel request for that rollout goes to the dispatcher
        (cancel,) = await asyncio.to_thread(backend.receive, 1)
        assert isinstance(cancel, CancelRequest) and cancel.session_id == sub.session_id
    finally:
        runtime.shutdown()


async def test_cancelling_execute_tasks_while_its_request_is_sent_still_cancels_the_rollout(
    descriptor, backend: Backend, monkeypatch: pytest.MonkeyPatch
):
    # GIVEN rLLM's call cancelled while the dispatch request is being sent (from a thread)
    runtime = _runtime()
    runtime.initialize()
    sending, cancelled = threading.Event(), threading.Event()
    invoke = runtime._client.invoke

    def slow_invoke(*args, **kwargs):
        sending.set()
        cancelled.wait(10)
        return invoke(*args, **kwargs)

    monkeypatch.setattr(runtime._client, "invoke", slow_invoke)
    sub = TaskSubmission(task={"q": 1}, session_id="d" * 36, task_id="q", inference_url=_session_url("d" * 36))
    task = asyncio.ensure_future(runtime.execute_tasks([sub], timeout=60))
    try:
        assert await asyncio.to_thread(sending.wait, 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # WHEN the request does leave
        cancelled.set()
        # THEN the rollout's cancel follows it
        messages = await asyncio.to_thread(backend.receive, 2)
        assert [type(m) for m in messages] == [DispatchRequest, CancelRequest]
        assert {m.session_id for m in messages} == {sub.session_id}
    finally:
        cancelled.set()
        runtime.shutdown()


def test_unknown_keys_under_agentcore_are_named_with_the_accepted_ones():
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['experimnet'\].*\['experiment', 'region', 'run'\]"):
        _config_runtime = backend_rllm.AgentCoreEventsRuntime(_config(experimnet="x"), exp_id=EXP)  # noqa: F841


def test_rllms_own_agentcore_keys_are_accepted_and_checked_against_the_experiment(descriptor):
    runtime = _runtime(agent_runtime_arn=RUNTIME_ARN, s3_bucket=descriptor.results_bucket, tps_limit=25)
    runtime.initialize()
    runtime.shutdown()
    wrong = _runtime(agent_runtime_arn="arn:aws:bedrock-agentcore:us-east-1:123456789012:runtime/other")
    with pytest.raises(ValueError, match="agent_runtime_arn.*uses"):
        wrong.initialize()


def test_rllms_default_experiment_name_is_not_taken_for_one_of_ours():
    # rLLM's rllm.trainer.experiment_name defaults to 'default', a valid name of no deployed experiment
    with pytest.raises(ValueError, match=r"rLLM's default 'default'.*\+rllm.remote_runtime.agentcore.experiment=NAME"):
        backend_rllm.AgentCoreEventsRuntime(_config(), exp_id="default")
    assert backend_rllm.AgentCoreEventsRuntime(_config(experiment="default"), exp_id="default").experiment == "default"


def test_an_experiment_name_our_ids_refuse_says_which_key_to_set():
    with pytest.raises(ValueError, match=r"\+rllm.remote_runtime.agentcore.experiment=NAME"):
        backend_rllm.AgentCoreEventsRuntime(_config(), exp_id="GSM8K_Qwen")
    assert backend_rllm.AgentCoreEventsRuntime(_config(experiment="gsm8k"), exp_id="GSM8K_Qwen").experiment == "gsm8k"


async def test_execute_tasks_before_initialize_is_an_error():
    with pytest.raises(RuntimeError, match="initialize"):
        await _runtime().execute_tasks([])


def test_install_adds_the_backend_to_rllms_factory_and_keeps_the_others(installed):
    original_wrapped = remote_runtime.create_remote_runtime
    backend_rllm.install()  # twice: wrapped once
    assert remote_runtime.create_remote_runtime is original_wrapped
    runtime = remote_runtime.create_remote_runtime(_config(experiment=EXP), exp_id="Trainer_Name", model_id="m")
    assert isinstance(runtime, backend_rllm.AgentCoreEventsRuntime) and runtime.experiment == EXP
    # rLLM's own factory still answers for the other backends
    with pytest.raises(ValueError, match="Unknown remote runtime backend"):
        remote_runtime.create_remote_runtime(RemoteRuntimeConfig(backend="nope"))
    assert os.environ["RAY_RUNTIME_ENV_HOOK"] == "trainer_client.backends.rllm.ray_runtime_env"


def test_the_ray_hook_adds_our_worker_setup_and_chains_the_hooks_already_set(monkeypatch, installed):
    calls: list[str] = []
    previous = types.ModuleType("previous_hooks")
    previous.runtime_env = lambda env: {**(env or {}), "env_vars": {"A": "1"}, "worker_process_setup_hook": "x.y"}
    previous.worker_setup = lambda: calls.append("previous")
    monkeypatch.setitem(sys.modules, "previous_hooks", previous)
    monkeypatch.setenv(backend_rllm._PREVIOUS_RUNTIME_ENV_HOOK, "previous_hooks.runtime_env")
    # WHEN Ray asks the hook for the job's runtime env
    env = backend_rllm.ray_runtime_env({"working_dir": None})
    # THEN workers run our setup, which runs the hook that was there before
    assert env["worker_process_setup_hook"] == "trainer_client.backends.rllm.setup_ray_worker"
    assert env["env_vars"] == {"A": "1", backend_rllm._PREVIOUS_WORKER_SETUP_HOOK: "x.y"}
    assert env["working_dir"] is None
    monkeypatch.setenv(backend_rllm._PREVIOUS_WORKER_SETUP_HOOK, "previous_hooks.worker_setup")
    backend_rllm.setup_ray_worker()
    assert calls == ["previous"]
    # AND a callable hook it cannot chain is refused with the fix
    monkeypatch.delenv(backend_rllm._PREVIOUS_RUNTIME_ENV_HOOK)
    with pytest.raises(ValueError, match="dotted path"):
        backend_rllm.ray_runtime_env({"worker_process_setup_hook": print})


@pytest.mark.parametrize("rllm_tree", ["none", "without_remote_runtime"])
def test_install_without_an_rllm_that_has_a_remote_runtime_says_how_to_install_it(tmp_path: Path, rllm_tree: str):
    # GIVEN a Python without rLLM, or with an rLLM older than its remote runtime
    if rllm_tree == "without_remote_runtime":
        (tmp_path / "rllm" / "engine").mkdir(parents=True)
        (tmp_path / "rllm" / "__init__.py").write_text("")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(Path(__file__).parents[2])])}
    # WHEN the training script calls install()
    done = subprocess.run(
        [sys.executable, "-c", "from trainer_client.backends.rllm import install\ninstall()"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    # THEN it fails with an ImportError that says how to install rLLM
    assert done.returncode != 0
    assert "RLLMNotInstalledError" in done.stderr and 'pip install "rllm[verl] @ git+https' in done.stderr
    assert ("has no rllm.engine.remote_runtime" in done.stderr) == (rllm_tree == "without_remote_runtime")
    assert issubclass(backend_rllm.RLLMNotInstalledError, ImportError)
