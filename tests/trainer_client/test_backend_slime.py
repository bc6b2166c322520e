"""slime's rollout hooks on moto: a scripted backend plays dispatcher + agent, a mock gateway serves traces.

slime is not on PyPI: its types come from tests/stand_ins/slime (see the README there).
"""

from __future__ import annotations

import functools
import sys
import types
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "stand_ins" / "slime"))

from slime.rollout.data_source import RolloutDataSource  # noqa: E402
from slime.utils.types import Sample  # noqa: E402
from trainer_support import BUCKET, FAST_POLL, Backend  # noqa: E402

from rollout_contract import DispatchRequest, ErrorInfo, RolloutResult, Status, Timings  # noqa: E402
from trainer_client import RolloutClient, TraceSettings  # noqa: E402
from trainer_client.backends import _shared  # noqa: E402
from trainer_client.backends import slime as backend_slime  # noqa: E402

GATEWAY = "http://gateway.test:9000"
#: Traces by script name: two calls that break the prefix (two rows), one call cut on length, none.
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
    """The scripted backend, remembering which traces each session's calls left in the gateway."""

    def __init__(self, descriptor) -> None:
        super().__init__(descriptor, outcome=self._play)
        self.traces: dict[str, list[dict[str, Any]]] = {}

    def _play(self, request: DispatchRequest) -> RolloutResult:
        """Member k of a group plays ``metadata["script"][k]``: (end status, traces name, reward)."""
        script = request.payload["metadata"]["script"]
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
        session_id = request.url.path.split("/")[2]
        return httpx.Response(200, json=self.traces.get(session_id, []))


@pytest.fixture
def agents(descriptor) -> _Agents:
    agents = _Agents(descriptor)
    factory = functools.partial(
        RolloutClient.for_experiment,
        poll=FAST_POLL,
        gateway_url=GATEWAY,
        gateway_transport=httpx.MockTransport(agents.gateway),
        traces=TraceSettings(attempts=2, delay_s=0.0),
    )
    _shared.shared_client(descriptor.exp_id, factory=factory)
    yield agents
    _shared.close_shared_clients()


def _args(exp_id: str, **overrides: Any) -> types.SimpleNamespace:
    settings = {
        "agentcore_experiment": exp_id,
        "agentcore_rollout_timeout_s": 60,
        "rollout_batch_size": 3,
        "n_samples_per_prompt": 2,
        "rollout_max_prompt_len": None,
        "rollout_max_response_len": 16,
        "rollout_temperature": 0.7,
        "reward_key": None,
    }
    return types.SimpleNamespace(**{**settings, **overrides})


def _prompt(*script: tuple[str, str, float]) -> Sample:
    return Sample(prompt=[{"role": "user", "content": "2+2?"}], label="4", metadata={"script": list(script)})


def _assert_trainable_shape(sample: Sample) -> None:
    """What slime's _convert_samples_to_train_data asserts of every sample."""
    assert len(sample.loss_mask) == sample.response_length == len(sample.rollout_log_probs)
    assert len(sample.tokens) > sample.response_length >= 1


def test_generate_rollout_returns_exact_groups_with_every_status_mapped(descriptor, agents: _Agents):
    # GIVEN three prompts whose two samples each end differently
    args = _args(descriptor.exp_id)
    source = RolloutDataSource(
        args,
        [
            _prompt(("succeeded", "two_rows", 1.0), ("succeeded", "length", 0.5)),
            _prompt(("agent_error", "two_rows", 0.0), ("timed_out", "none", 0.0)),
            _prompt(("dispatch_failed", "none", 0.0), ("cancelled", "none", 0.0)),
        ],
    )
    thread = agents.serve_in_thread(6)
    # WHEN slime calls the whole-rollout hook
    output = backend_slime.generate_rollout(args, 0, source)
    thread.join(10)
    # THEN exactly rollout_batch_size groups of n_samples_per_prompt come back, in index order
    groups = output.samples
    assert [len(group) for group in groups] == [2, 2, 2]
    assert [sample.index for group in groups for sample in group] == list(range(6))
    for sample in (s for group in groups for s in group):
        _assert_trainable_shape(sample)
    (done, cut), (failed, lost), (refused, cancelled) = groups
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
    # and each group was one GRPO group of ours, with slime's sampling parameters under OpenAI names
    by_group = {}
    for request in agents.requests:
        by_group.setdefault(request.input_id, []).append(request)
    assert sorted(len(members) for members in by_group.values()) == [2, 2, 2]
    assert agents.requests[0].rollout["sampling_params"] == {"temperature": 0.7, "max_tokens": 16}


def test_truncation_to_slimes_lengths_marks_the_sample_truncated(descriptor, agents: _Agents):
    args = _args(descriptor.exp_id, rollout_batch_size=1, n_samples_per_prompt=1, rollout_max_response_len=1)
    source = RolloutDataSource(args, [_prompt(("succeeded", "two_rows", 1.0))])
    thread = agents.serve_in_thread(1)
    ((sample,),) = backend_slime.generate_rollout(args, 4, source).samples
    thread.join(10)
    assert (sample.status, sample.tokens, sample.loss_mask, sample.rollout_log_probs) == (
        Sample.Status.TRUNCATED,
        [5, 6, 7, 9, 8],
        [1],
        [-0.3],
    )


def test_the_mask_policy_removes_failed_samples_from_training(descriptor, agents: _Agents):
    args = _args(descriptor.exp_id, rollout_batch_size=1, n_samples_per_prompt=1, agentcore_failure_policy="mask")
    source = RolloutDataSource(args, [_prompt(("agent_error", "two_rows", 0.0))])
    thread = agents.serve_in_thread(1)
    ((sample,),) = backend_slime.generate_rollout(args, 0, source).samples
    thread.join(10)
    assert (sample.status, sample.reward, sample.remove_sample) == (Sample.Status.FAILED, 0.0, True)


async def test_the_per_sample_hook_runs_one_rollout_and_leaves_a_missing_reward_to_slime(descriptor, agents: _Agents):
    args = _args(descriptor.exp_id)
    (group,) = RolloutDataSource(
        args, [_prompt(("succeeded", "length", None), ("succeeded", "none", 1.0))]
    ).get_samples(1)
    group[0].session_id = str(uuid.uuid4())  # slime's routing key, set before its hook runs
    thread = agents.serve_in_thread(1)
    sample = await backend_slime.generate(
        args, group[0], {"temperature": 1.0, "max_new_tokens": 8, "no_stop_trim": True}
    )
    thread.join(10)
    assert (sample.status, sample.reward, sample.tokens) == (Sample.Status.TRUNCATED, None, [5, 7, 7, 7])
    assert (agents.requests[0].input_id, agents.requests[0].session_id) == ("slime-group-0", group[0].session_id)
    assert agents.requests[0].rollout["sampling_params"] == {"temperature": 1.0, "max_tokens": 8}


def test_settings_say_what_is_missing_and_evaluation_says_what_to_use_instead(descriptor):
    with pytest.raises(ValueError, match="agentcore_experiment: NAME"):
        backend_slime.SlimeSettings.from_args(types.SimpleNamespace())
    with pytest.raises(ValueError, match="agentcore_failure_policy"):
        backend_slime.SlimeSettings.from_args(_args(descriptor.exp_id, agentcore_failure_policy="retry"))
    with pytest.raises(NotImplementedError, match="--eval-function-path"):
        backend_slime.generate_rollout(_args(descriptor.exp_id), 0, None, evaluation=True)
