"""slime's rollout hooks at slime's own defaults: its argument table, its data source, its rollout-to-train conversion.

slime is not on PyPI: its modules are the stand-ins in tests/stand_ins/slime (see the README there), with
``args`` parsed from slime's recorded argument table plus exactly the README's flags and YAML
(``examples/math_agent/backends/slime.sh``). The data source loads its own prompt file and tokenizer; the
rollouts run through our client on moto, a scripted backend playing dispatcher + agent, a mock gateway
serving traces. Each step goes through the stand-in ``RolloutManager`` (``_convert_samples_to_train_data``).
"""

from __future__ import annotations

import functools
import logging
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

pytest.importorskip("torch")
TESTS = Path(__file__).parents[1]
sys.path[:0] = [str(TESTS / "stand_ins" / "slime"), str(TESTS / "trainer_client")]

from slime.ray.rollout import RolloutManager  # noqa: E402
from slime.utils.types import Sample  # noqa: E402
from slime_support import REPO, SLIME_COMMAND, slime_args  # noqa: E402
from trainer_support import BUCKET, FAST_POLL, Backend, aws_env, create_experiment  # noqa: E402, F401

from rollout_contract import DispatchRequest, ErrorInfo, RolloutResult, Status, Timings  # noqa: E402
from trainer_client import RolloutClient, TraceSettings  # noqa: E402
from trainer_client.backends import _shared  # noqa: E402
from trainer_client.backends import slime as backend_slime  # noqa: E402

GATEWAY = "http://gateway.test:9000"
#: Traces by name: two calls that break the prefix (two rows), one call cut on length, none.
TRACES: dict[str, list[dict[str, Any]]] = {
    "two_rows": [
        {"prompt_token_ids": [5, 6], "completion_token_ids": [7, 2], "logprobs": [-0.1, -0.2], "finish_reason": "stop"},
        {"prompt_token_ids": [5, 6, 7, 9], "completion_token_ids": [8, 2], "logprobs": [-0.3, -0.4]},
    ],
    "length": [
        {"prompt_token_ids": [5], "completion_token_ids": [7, 7, 7], "logprobs": [-1.0] * 3, "finish_reason": "length"}
    ],
    "none": [],
}


class _Agents(Backend):
    """The scripted backend, remembering which traces each session's calls left in the gateway.

    Member k of a group plays ``metadata["script"][k]`` (end status, traces, reward); a payload without a
    script (the math agent's ``{prompt, answer}``) succeeds with two rows and reward 1.0.
    """

    def __init__(self, descriptor) -> None:
        super().__init__(descriptor, outcome=self._play)
        self.traces: dict[str, list[dict[str, Any]]] = {}

    def _play(self, request: DispatchRequest) -> RolloutResult:
        script = request.payload.get("metadata", {}).get("script") or [("succeeded", "two_rows", 1.0)] * 64
        end_as, traces, reward = script[sum(r.input_id == request.input_id for r in self.requests) - 1]
        self.traces[request.session_id] = [
            {"trace_id": f"{request.session_id}-{i}", "session_id": request.session_id, **trace}
            for i, trace in enumerate(TRACES[traces])
        ]
        if end_as == "succeeded":
            output = {"rewards": reward, "response": "#### 4"}
            return RolloutResult.from_handler_output(
                output, key=request.key, s3_bucket=BUCKET, payload=request.payload, timings=Timings()
            )
        error = ErrorInfo(type="ValueError", message="boom") if end_as == "agent_error" else None
        return RolloutResult.terminal(Status(end_as), key=request.key, s3_bucket=BUCKET, error=error)

    def gateway(self, request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=self.traces.get(request.url.path.split("/")[2], []))


def _agents(experiment: str, model_id: str | None = None) -> _Agents:
    agents = _Agents(create_experiment(experiment))
    factory = functools.partial(
        RolloutClient.for_experiment,
        poll=FAST_POLL,
        gateway_url=GATEWAY,
        gateway_transport=httpx.MockTransport(agents.gateway),
        traces=TraceSettings(attempts=2, delay_s=0.0),
    )
    _shared.shared_client(experiment, model_id=model_id, factory=factory)
    return agents


@pytest.fixture
def readme_agents(monkeypatch) -> Any:
    monkeypatch.chdir(REPO)  # the README's relative --custom-config-path
    config = yaml.safe_load((SLIME_COMMAND.parent / "slime_agentcore.yaml").read_text())
    yield _agents(config["agentcore_experiment"], model_id=config["agentcore_model_id"])
    _shared.close_shared_clients()


@pytest.fixture
def agents(monkeypatch) -> Any:
    monkeypatch.chdir(REPO)
    yield _agents("slime-unit")
    _shared.close_shared_clients()


def _scripted(*script: tuple[str, str, float | None]) -> dict:
    return {"prompt": "2+2?", "answer": "4", "metadata": {"script": list(script)}}


def _unit_config(**overrides: Any) -> dict:
    return {"agentcore_experiment": "slime-unit", "agentcore_rollout_timeout_s": 60, **overrides}


def test_the_readme_job_runs_a_step_through_slimes_conversion_with_slimes_default_sampling(tmp_path, readme_agents):
    # GIVEN slime's defaults plus the README's flags and YAML, two math prompts of two samples
    args = slime_args(tmp_path, [{"prompt": "2+2?", "answer": "4"}, {"prompt": "3+3?", "answer": "6"}])
    assert (args.rollout_top_p, args.rollout_top_k, args.rollout_temperature) == (1.0, -1, 1.0)
    manager = RolloutManager(args)  # slime's default data source, loading the prompt file itself
    thread = readme_agents.serve_in_thread(4)
    # WHEN slime runs the step and converts it to training data
    train_data, metrics = manager.generate(0)
    thread.join(10)
    # THEN every sample trains, under the math agent's payload and slime's default sampling parameters
    assert metrics == {"agentcore/succeeded": 4}
    assert train_data["loss_masks"] == [[1, 1]] * 4 and train_data["rollout_log_probs"] == [[-0.3, -0.4]] * 4
    assert sorted(request.payload["prompt"] for request in readme_agents.requests) == ["2+2?", "2+2?", "3+3?", "3+3?"]
    assert {request.payload["answer"] for request in readme_agents.requests} == {"4", "6"}
    assert readme_agents.requests[0].rollout["sampling_params"] == {"temperature": 1.0, "top_p": 1.0, "top_k": -1}


def test_rollout_top_p_below_one_is_refused_before_any_rollout_and_the_yaml_override_samples_with_it(tmp_path, agents):
    # GIVEN --rollout-top-p 0.9: slime's conversion would require every sample's top-p nucleus (PR #2167)
    rows = [_scripted(("succeeded", "two_rows", 1.0), ("succeeded", "two_rows", 0.0))]
    manager = RolloutManager(slime_args(tmp_path, rows, "--rollout-top-p", "0.9", config=_unit_config()))
    # WHEN slime runs a step THEN the hook refuses before submitting anything, naming the way out
    with pytest.raises(ValueError, match=r"rollout_top_p_token_ids.*agentcore_sampling_params: \{top_p: 0.9\}"):
        manager.generate(0)
    assert agents.requests == []
    # AND with that way out (slime's top-p 1.0, the agents' 0.9) the step converts to training data
    config = _unit_config(agentcore_sampling_params={"top_p": 0.9})
    manager = RolloutManager(slime_args(tmp_path, rows, config=config))
    thread = agents.serve_in_thread(2)
    train_data, _ = manager.generate(0)
    thread.join(10)
    group = _group(train_data, 0)
    assert (group[1.0][0], group[0.0][0]) == pytest.approx((0.7071, -0.7071), abs=1e-3)
    assert agents.requests[0].rollout["sampling_params"]["top_p"] == 0.9


def test_padding_samples_stay_out_of_the_group_statistics_with_our_post_process_hook(tmp_path, agents, caplog):
    # GIVEN a group with one success and one rollout that never ran (padding), and a group of 1.0 and 0.0
    rows = [
        _scripted(("succeeded", "two_rows", 1.0), ("dispatch_failed", "none", None)),
        _scripted(("succeeded", "two_rows", 1.0), ("succeeded", "two_rows", 0.0)),
    ]
    args = slime_args(tmp_path, rows, config=_unit_config())  # the README's --custom-reward-post-process-path
    thread = agents.serve_in_thread(4)
    train_data, _ = RolloutManager(args).generate(0)
    thread.join(10)
    # THEN the lone success has no one to beat (advantage 0, not +0.71 against a phantom 0), the padding 0,
    # and the full group is normalised as slime does
    lone, full = _group(train_data, 0), _group(train_data, 2)
    assert lone[1.0][0] == pytest.approx(0.0, abs=1e-3) and lone[0.0] == (pytest.approx(0.0, abs=1e-3), [0])
    assert (full[1.0][0], full[0.0][0]) == pytest.approx((0.7071, -0.7071), abs=1e-3)
    # AND without the hook slime counts the padding as a 0 reward, and the step says so
    args.custom_reward_post_process_path = None
    thread = agents.serve_in_thread(4)
    with caplog.at_level(logging.WARNING, logger="trainer_client.backends.slime"):
        train_data, _ = RolloutManager(args).generate(1)
    thread.join(10)
    lone = _group(train_data, 0)
    assert (lone[1.0][0], lone[0.0][0]) == pytest.approx((0.7071, -0.7071), abs=1e-3)
    assert "1 padding samples count as reward 0" in caplog.text


def _group(train_data: dict[str, Any], first: int) -> dict[float, tuple[float, list[int]]]:
    """The two samples of the group at ``first``, by raw reward: (reward, loss mask). A group's samples hold its
    members' outcomes in completion order (``RolloutGroup.items``), which two results written at once do not fix."""
    return {
        train_data["raw_reward"][i]: (train_data["rewards"][i], train_data["loss_masks"][i]) for i in (first, first + 1)
    }


def test_generate_rollout_returns_exact_groups_with_every_status_mapped(tmp_path, agents):
    # GIVEN three prompts whose two samples each end differently
    rows = [
        _scripted(("succeeded", "two_rows", 1.0), ("succeeded", "length", 0.5)),
        _scripted(("agent_error", "two_rows", 0.0), ("timed_out", "none", 0.0)),
        _scripted(("dispatch_failed", "none", 0.0), ("cancelled", "none", 0.0)),
    ]
    args = slime_args(
        tmp_path, rows, "--rollout-max-response-len", "16", "--rollout-temperature", "0.7", config=_unit_config()
    )
    manager = RolloutManager(args)
    thread = agents.serve_in_thread(6)
    # WHEN slime calls the whole-rollout hook and converts its output
    output = backend_slime.generate_rollout(args, 0, manager.data_source)
    train_data = manager._convert_samples_to_train_data([s for group in output.samples for s in group])
    thread.join(10)
    # THEN exactly rollout_batch_size groups of n_samples_per_prompt come back, in index order
    groups = output.samples
    assert [len(group) for group in groups] == [2, 2, 2]
    assert train_data["sample_indices"] == list(range(6))
    # a group's samples hold its members' outcomes in completion order: take them in the order of their statuses
    order = [Sample.Status.COMPLETED, Sample.Status.TRUNCATED, Sample.Status.FAILED, Sample.Status.ABORTED]
    (done, cut), (failed, lost) = (sorted(group, key=lambda sample: order.index(sample.status)) for group in groups[:2])
    refused, cancelled = groups[2]
    # a prefix break keeps the last row: the first call is part of its prompt
    assert (done.status, done.reward, done.tokens, done.loss_mask) == (
        Sample.Status.COMPLETED,
        1.0,
        [5, 6, 7, 9, 8, 2],
        [1, 1],
    )
    assert done.rollout_log_probs == [-0.3, -0.4]
    assert done.metadata["agentcore"]["rows"] == 2 and done.response == "#### 4"
    assert (cut.status, cut.reward, cut.response_length) == (Sample.Status.TRUNCATED, 0.5, 3)
    assert (failed.status, failed.reward, failed.remove_sample) == (Sample.Status.FAILED, 0.0, False)
    assert failed.metadata["agentcore"]["error"] == "agent_error: boom"
    for padding in (lost, refused, cancelled):
        assert (padding.status, padding.remove_sample, padding.loss_mask, padding.reward) == (
            Sample.Status.ABORTED,
            True,
            [0],
            0.0,
        )
    assert output.metrics == {
        "agentcore/succeeded": 2,
        "agentcore/agent_error": 1,
        "agentcore/timed_out": 1,
        "agentcore/dispatch_failed": 1,
        "agentcore/cancelled": 1,
    }
    # and each group was one GRPO group of ours, with slime's sampling parameters under their _rollout names
    assert sorted(sum(r.input_id == q.input_id for q in agents.requests) for r in agents.requests) == [2] * 6
    assert agents.requests[0].rollout["sampling_params"] == {
        "temperature": 0.7,
        "top_p": 1.0,
        "top_k": -1,
        "max_tokens": 16,
    }


def test_truncation_and_the_mask_policy(tmp_path, agents):
    rows = [_scripted(("succeeded", "two_rows", 1.0), ("agent_error", "two_rows", 0.0))]
    config = _unit_config(agentcore_failure_policy="mask")
    args = slime_args(tmp_path, rows, "--rollout-max-response-len", "1", config=config)
    thread = agents.serve_in_thread(2)
    ((first, second),) = backend_slime.generate_rollout(args, 4, RolloutManager(args).data_source).samples
    thread.join(10)
    cut, failed = (first, second) if first.status is Sample.Status.TRUNCATED else (second, first)  # completion order
    assert (cut.status, cut.tokens, cut.loss_mask, cut.rollout_log_probs) == (
        Sample.Status.TRUNCATED,
        [5, 6, 7, 9, 8],
        [1],
        [-0.3],
    )
    assert (failed.status, failed.reward, failed.remove_sample) == (Sample.Status.FAILED, 0.0, True)


async def test_the_per_sample_hook_forwards_slimes_sampling_and_leaves_a_missing_reward_to_slime(tmp_path, agents):
    rows = [_scripted(("succeeded", "length", None), ("succeeded", "none", 1.0))]
    args = slime_args(tmp_path, rows, config=_unit_config())
    (group,) = RolloutManager(args).data_source.get_samples(1)
    group[0].session_id = str(uuid.uuid4())  # slime's routing key, set before its hook runs
    # what slime's GenerateState passes: sampling plus its detokenization options
    sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_new_tokens": 8, "stop": None}
    sampling |= {"skip_special_tokens": False, "no_stop_trim": True, "spaces_between_special_tokens": False}
    thread = agents.serve_in_thread(1)
    sample = await backend_slime.generate(args, group[0], sampling)
    thread.join(10)
    assert (sample.status, sample.reward, sample.tokens) == (Sample.Status.TRUNCATED, None, [5, 7, 7, 7])
    assert (agents.requests[0].input_id, agents.requests[0].session_id) == ("slime-group-0", group[0].session_id)
    assert agents.requests[0].rollout["sampling_params"] == {
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": -1,
        "max_tokens": 8,
    }


def test_settings_say_what_is_missing_and_evaluation_says_what_to_use_instead(tmp_path):
    args = slime_args(tmp_path, [_scripted()], config={})
    with pytest.raises(ValueError, match="agentcore_experiment: NAME"):
        backend_slime.SlimeSettings.from_args(args)
    args = slime_args(tmp_path, [_scripted()], config=_unit_config(agentcore_failure_policy="retry"))
    with pytest.raises(ValueError, match="agentcore_failure_policy"):
        backend_slime.SlimeSettings.from_args(args)
    # slime's --eval-function-path defaults to the rollout function: its first evaluation says what to set
    manager = RolloutManager(slime_args(tmp_path, [_scripted()], "--eval-interval", "5", config=_unit_config()))
    with pytest.raises(NotImplementedError, match="--eval-function-path"):
        manager.eval(0)
