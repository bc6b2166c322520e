"""slime's rollout hooks at slime's own defaults: its argument table, its data source, its rollout-to-train conversion.

slime is not on PyPI: its modules are the stand-ins in tests/stand_ins/slime, or the real slime tree named by
``AGENTCORE_STAND_INS_SLIME`` (``slime_support``; see the README there), with ``args`` parsed from slime's
recorded argument table plus exactly the README's flags and YAML (``examples/math_agent/backends/slime.sh``).
The data source loads its own prompt file and tokenizer; the rollouts run through our client on moto, a
scripted backend playing dispatcher + agent, a mock gateway serving traces. Each step goes through slime's
``RolloutManager`` conversion (``slime_support.rollout_manager``) and, where it matters, its ``build_dp_schedule``.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import logging
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

pytest.importorskip("torch")
TESTS = Path(__file__).parents[1]
sys.path[:0] = [str(TESTS / "trainer_client")]

from slime_support import REPO, SLIME_COMMAND, dp_schedule, rollout_manager, slime_args  # noqa: E402, I001
from slime.utils.types import Sample  # noqa: E402
from trainer_support import BUCKET, FAST_POLL, Backend, aws_env, create_experiment  # noqa: E402, F401

from rollout_contract import DispatchRequest, ErrorInfo, RolloutResult, Status, Timings  # noqa: E402
from trainer_client import RolloutClient, TraceSettings  # noqa: E402
from trainer_client.backends import _shared  # noqa: E402
from trainer_client.backends import slime as backend_slime  # noqa: E402
from trainer_client.routing import RoutedExperts, RoutingUnavailableError  # noqa: E402

GATEWAY = "http://gateway.test:9000"
#: Traces by name: two calls that break the prefix (two rows), two that extend it (one row), one call cut on
#: length, none.
TRACES: dict[str, list[dict[str, Any]]] = {
    "two_rows": [
        {"prompt_token_ids": [5, 6], "completion_token_ids": [7, 2], "logprobs": [-0.1, -0.2], "finish_reason": "stop"},
        {"prompt_token_ids": [5, 6, 7, 9], "completion_token_ids": [8, 2], "logprobs": [-0.3, -0.4]},
    ],
    "one_row": [
        {"prompt_token_ids": [5, 6], "completion_token_ids": [7, 2], "logprobs": [-0.1, -0.2], "finish_reason": "stop"},
        {"prompt_token_ids": [5, 6, 7, 2, 9], "completion_token_ids": [8, 2], "logprobs": [-0.3, -0.4]},
    ],
    "length": [
        {"prompt_token_ids": [5], "completion_token_ids": [7, 7, 7], "logprobs": [-1.0] * 3, "finish_reason": "length"}
    ],
    "none": [],
}


def _route(token: int, position: int) -> list[list[int]]:
    """A 2-layer top-2 router: what a MoE server returns for ``token`` at ``position``."""
    return [[(token + position) % 8, (3 * token + layer) % 8] for layer in range(2)]


def _served(trace: dict[str, Any], version: int) -> dict[str, Any]:
    """``trace`` as our gateway records it from a MoE server at weight ``version``."""
    fed = (trace["prompt_token_ids"] + trace["completion_token_ids"])[:-1]
    routing = RoutedExperts.from_nested([_route(token, i) for i, token in enumerate(fed)])
    return {**trace, "metadata": {"weight_version": version, "routed_experts": routing.model_dump()}}


#: The two-row rollout served by a MoE policy whose weights were pushed between its calls (versions 3, then 4).
TRACES["two_rows_moe"] = [_served(trace, version) for trace, version in zip(TRACES["two_rows"], (3, 4), strict=True)]
TRACES["one_row_moe"] = [_served(trace, 4) for trace in TRACES["one_row"]]


class _Agents(Backend):
    """The scripted backend, remembering which traces each session's calls left in the gateway.

    Member k of a group plays ``metadata["script"][k]`` (end status, traces, reward); a payload without a
    script (the math agent's ``{prompt, answer}``) succeeds with two rows and reward 1.0.
    """

    def __init__(self, descriptor) -> None:
        super().__init__(descriptor, outcome=self._play)
        self.traces: dict[str, list[dict[str, Any]]] = {}
        #: What the servers behind the gateway record for a model call the trainer makes (a MoE policy's call).
        self.served_call = TRACES["one_row_moe"][0]

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
        session = request.url.path.split("/")[2]
        if request.method == "POST":  # a model call of the trainer's own (the start-up routing check)
            self.traces[session] = [{"trace_id": f"{session}-0", "session_id": session, **self.served_call}]
            return httpx.Response(200, json={"choices": [{"index": 0, "message": {"content": "4"}}]})
        return httpx.Response(200, json=self.traces.get(session, []))


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
    monkeypatch.setattr(backend_slime._workers, "report_weight_version", lambda client, version, framework: False)
    config = yaml.safe_load((SLIME_COMMAND.parent / "slime_agentcore.yaml").read_text())
    yield _agents(config["agentcore_experiment"], model_id=config["agentcore_model_id"])
    _shared.close_shared_clients()


@pytest.fixture
def agents(monkeypatch) -> Any:
    monkeypatch.chdir(REPO)
    reported: list[int] = []
    monkeypatch.setattr(
        backend_slime._workers, "report_weight_version", lambda client, version, framework: reported.append(version)
    )
    monkeypatch.setattr(backend_slime._workers, "_routing_returned", set())
    backend = _agents("slime-unit")
    backend.reported_versions = reported
    yield backend
    _shared.close_shared_clients()


def _scripted(*script: tuple[str, str, float | None]) -> dict:
    return {"prompt": "2+2?", "answer": "4", "metadata": {"script": list(script)}}


def _unit_config(**overrides: Any) -> dict:
    return {"agentcore_experiment": "slime-unit", "agentcore_rollout_timeout_s": 60, **overrides}


def test_the_readme_job_runs_a_step_through_slimes_conversion_with_slimes_default_sampling(tmp_path, readme_agents):
    # GIVEN slime's defaults plus the README's flags and YAML, two math prompts of two samples
    args = slime_args(tmp_path, [{"prompt": "2+2?", "answer": "4"}, {"prompt": "3+3?", "answer": "6"}])
    assert (args.rollout_top_p, args.rollout_top_k, args.rollout_temperature) == (1.0, -1, 1.0)
    manager = rollout_manager(args)  # slime's default data source, loading the prompt file itself
    thread = readme_agents.serve_in_thread(4)
    # WHEN slime runs the step and converts it to training data
    train_data, metrics = manager.generate(0)
    thread.join(10)
    # THEN every row of every rollout trains: two samples per rollout (its calls broke the prefix), one rollout id
    assert metrics == {
        "agentcore/succeeded": 4,
        "agentcore/sampled_tokens": 16,
        "agentcore/trained_tokens": 16,
        "agentcore/rows": 8,
    }
    assert train_data["loss_masks"] == [[1, 1]] * 8
    assert train_data["rollout_log_probs"] == [[-0.1, -0.2], [-0.3, -0.4]] * 4
    assert train_data["rollout_ids"] == [0, 0, 1, 1, 2, 2, 3, 3] and train_data["rollout_mask_sums"] == [4] * 8
    # under the math agent's payload and slime's default sampling parameters
    assert sorted(request.payload["prompt"] for request in readme_agents.requests) == ["2+2?", "2+2?", "3+3?", "3+3?"]
    assert {request.payload["answer"] for request in readme_agents.requests} == {"4", "6"}
    assert readme_agents.requests[0].rollout["sampling_params"] == {"temperature": 1.0, "top_p": 1.0, "top_k": -1}


def test_rollout_top_p_below_one_is_refused_before_any_rollout_and_the_yaml_override_samples_with_it(tmp_path, agents):
    # GIVEN --rollout-top-p 0.9: slime's conversion would require every sample's top-p nucleus (PR #2167)
    rows = [_scripted(("succeeded", "two_rows", 1.0), ("succeeded", "two_rows", 0.0))]
    manager = rollout_manager(slime_args(tmp_path, rows, "--rollout-top-p", "0.9", config=_unit_config()))
    # WHEN slime runs a step THEN the hook refuses before submitting anything, naming the way out
    with pytest.raises(ValueError, match=r"rollout_top_p_token_ids.*agentcore_sampling_params: \{top_p: 0.9\}"):
        manager.generate(0)
    assert agents.requests == []
    # AND with that way out (slime's top-p 1.0, the agents' 0.9) the step converts to training data
    config = _unit_config(agentcore_sampling_params={"top_p": 0.9})
    manager = rollout_manager(slime_args(tmp_path, rows, config=config))
    thread = agents.serve_in_thread(2)
    train_data, _ = manager.generate(0)
    thread.join(10)
    assert _advantages(train_data) == {
        1.0: pytest.approx([0.7071] * 2, abs=1e-3),
        0.0: pytest.approx([-0.7071] * 2, abs=1e-3),
    }
    assert agents.requests[0].rollout["sampling_params"]["top_p"] == 0.9


def _advantages(train_data: dict[str, Any], group: int | None = None) -> dict[float, list[float]]:
    """The advantages of a group's samples (all groups when None), by their rollout's raw reward. A group's
    rollouts hold its members' outcomes in completion order, which two results written at once do not fix."""
    advantages: dict[float, list[float]] = {}
    for i, reward in enumerate(train_data["raw_reward"]):
        if group is None or train_data["sample_indices"][i] // 2 == group:
            advantages.setdefault(reward, []).append(train_data["rewards"][i])
    return advantages


def _near(*advantages: float) -> Any:
    return pytest.approx(list(advantages), abs=1e-3)


def test_a_group_of_rollouts_with_different_row_counts_gets_one_advantage_per_rollout(tmp_path, agents):
    # GIVEN a group whose success made two rows and whose failure one, and a group of one success and one
    # rollout that never ran (padding)
    rows = [
        _scripted(("succeeded", "two_rows", 1.0), ("succeeded", "one_row", 0.0)),
        _scripted(("succeeded", "two_rows", 1.0), ("dispatch_failed", "none", None)),
    ]
    args = slime_args(tmp_path, rows, config=_unit_config())  # the README's --custom-reward-post-process-path
    thread = agents.serve_in_thread(4)
    train_data, metrics = rollout_manager(args).generate(0)
    thread.join(10)
    # THEN every sampled token is trained: each rollout's loss-mask sum is its 4 sampled tokens
    by_rollout: dict[int, int] = {}
    for rollout, mask in zip(train_data["rollout_ids"], train_data["loss_masks"], strict=True):
        by_rollout[rollout] = by_rollout.get(rollout, 0) + sum(mask)
    assert by_rollout == {0: 4, 1: 4, 2: 4, 3: 0} or by_rollout == {0: 4, 1: 4, 2: 0, 3: 4}
    assert (metrics["agentcore/sampled_tokens"], metrics["agentcore/trained_tokens"], metrics["agentcore/rows"]) == (
        12,
        12,
        5,
    )
    # AND the first group is normalised over its two rollouts (not its three samples): both rows of the success
    # get +0.71, the one-row failure -0.71
    assert _advantages(train_data, 0) == {
        1.0: pytest.approx([0.7071] * 2, abs=1e-3),
        0.0: pytest.approx([-0.7071], abs=1e-3),
    }
    # AND the lone success has no one to beat (advantage 0, not +0.71 against a phantom 0), the padding 0
    assert _advantages(train_data, 1) == {1.0: _near(0.0, 0.0), 0.0: [0.0]}


def test_without_our_reward_hook_a_step_of_several_rows_per_rollout_is_refused_and_padding_only_warns(
    tmp_path, agents, caplog
):
    # GIVEN slime's default reward normalisation (no --custom-reward-post-process-path)
    rows = [_scripted(("succeeded", "two_rows", 1.0), ("succeeded", "one_row", 0.0))]
    args = slime_args(tmp_path, rows, config=_unit_config())
    args.custom_reward_post_process_path = None
    thread = agents.serve_in_thread(2)
    # WHEN a rollout gives two samples THEN the step is refused before slime trains on it, naming the flag
    with pytest.raises(ValueError, match="3 samples for 2 rollouts.*--custom-reward-post-process-path trainer_client"):
        rollout_manager(args).generate(0)
    thread.join(10)
    # AND with one row per rollout and a padding sample slime's normalisation runs, counting it as a 0, and says so
    rows = [
        _scripted(("succeeded", "one_row", 1.0), ("dispatch_failed", "none", None)),
        _scripted(("succeeded", "one_row", 1.0), ("succeeded", "one_row", 0.0)),
    ]
    args = slime_args(tmp_path, rows, config=_unit_config())
    args.custom_reward_post_process_path = None
    thread = agents.serve_in_thread(4)
    with caplog.at_level(logging.WARNING, logger="trainer_client.backends.slime"):
        train_data, _ = rollout_manager(args).generate(1)
    thread.join(10)
    assert _advantages(train_data, 0) == {
        1.0: pytest.approx([0.7071], abs=1e-3),
        0.0: pytest.approx([-0.7071], abs=1e-3),
    }
    assert "1 padding samples count as reward 0" in caplog.text


def test_static_micro_batches_get_padding_rows_so_slimes_schedule_keeps_every_sample(tmp_path, agents):
    # GIVEN slime's static micro-batches (micro_batch_size 1) on two data-parallel ranks (Megatron's
    # data_parallel_size) and steps of two rollouts: the first step's rollouts make 2 + 1 rows
    rows = [
        _scripted(("succeeded", "two_rows", 1.0), ("succeeded", "one_row", 0.0)),
        _scripted(("succeeded", "one_row", 1.0), ("succeeded", "one_row", 0.0)),
    ]
    args = slime_args(tmp_path, rows, "--global-batch-size", "2", config=_unit_config())
    args.data_parallel_size = 2
    manager = rollout_manager(args)
    thread = agents.serve_in_thread(4)
    # WHEN slime runs the step, converts it and splits it over its ranks
    output = backend_slime.generate_rollout(args, 0, manager.data_source)
    thread.join(10)
    samples = [sample for group in output.samples for rollout in group for sample in rollout]
    train_data = manager._convert_samples_to_train_data(samples)
    partitions, micro_batches = dp_schedule(args, train_data, dp_size=2)
    # THEN the first step got one masked padding row in its last rollout (4 samples for 2 ranks), and every
    # sample is scheduled, none trimmed: both steps give each rank the same number of micro-batches
    padding = [i for i, sample in enumerate(samples) if sample.metadata["agentcore"].get("padding")]
    assert len(padding) == 1 and len(samples) == 6
    assert samples[padding[0]].rollout_id == samples[padding[0] - 1].rollout_id and train_data["loss_masks"][
        padding[0]
    ] == [0]
    assert sorted(i for partition in partitions for i in partition) == list(range(6)) and micro_batches == [2, 1]
    assert train_data["rewards"][padding[0]] == 0.0
    # (without that row slime's static path refuses the step)
    real = [i for i in range(6) if i not in padding]
    with pytest.raises(AssertionError, match="static path"):
        dp_schedule(args, {key: [train_data[key][i] for i in real] for key in ("tokens", "rollout_ids")}, dp_size=2)


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
    manager = rollout_manager(args)
    thread = agents.serve_in_thread(6)
    # WHEN slime calls the whole-rollout hook and converts its output
    output = backend_slime.generate_rollout(args, 0, manager.data_source)
    train_data = manager._convert_samples_to_train_data(
        [s for group in output.samples for rollout in group for s in rollout]
    )
    thread.join(10)
    # THEN exactly rollout_batch_size groups of n_samples_per_prompt rollouts come back, in index order
    groups = output.samples
    assert [len(group) for group in groups] == [2, 2, 2]
    assert [rollout[0].index for group in groups for rollout in group] == list(range(6))
    # a group's rollouts hold its members' outcomes in completion order: take them in the order of their statuses
    order = [Sample.Status.COMPLETED, Sample.Status.TRUNCATED, Sample.Status.FAILED, Sample.Status.ABORTED]
    (done, cut), (failed, lost) = (
        sorted(group, key=lambda rollout: order.index(rollout[0].status)) for group in groups[:2]
    )
    refused, cancelled = groups[2]
    # a prefix break gives one sample per row, sharing the rollout's reward, status, rollout_id and session
    first, last = done
    assert (first.tokens, first.loss_mask, first.rollout_log_probs) == ([5, 6, 7, 2], [1, 1], [-0.1, -0.2])
    assert (last.tokens, last.loss_mask, last.rollout_log_probs) == ([5, 6, 7, 9, 8, 2], [1, 1], [-0.3, -0.4])
    for row, sample in enumerate(done):
        assert (sample.status, sample.reward, sample.response, sample.rollout_id) == (
            Sample.Status.COMPLETED,
            1.0,
            "#### 4",
            first.index,
        )
        assert sample.metadata["agentcore"] | {"session_id": None} == {
            "session_id": None,
            "status": "succeeded",
            "error": None,
            "rows": 2,
            "row": row,
            "tokens_by_version": {},  # the gateway recorded no weight version
        }
    assert first.metadata["agentcore"]["session_id"] == last.metadata["agentcore"]["session_id"]
    ((cut,),) = [cut]
    assert (cut.status, cut.reward, cut.response_length) == (Sample.Status.TRUNCATED, 0.5, 3)
    assert [(s.status, s.reward, s.remove_sample) for s in failed] == [(Sample.Status.FAILED, 0.0, False)] * 2
    assert failed[0].metadata["agentcore"]["error"] == "agent_error: boom"
    for (padding,) in (lost, refused, cancelled):
        assert (padding.status, padding.remove_sample, padding.loss_mask, padding.reward) == (
            Sample.Status.ABORTED,
            True,
            [0],
            0.0,
        )
    # slime keeps a rollout's samples together (one rollout id) and trains on every sampled token
    # (the two-row rollouts of the first two groups land on either prompt sample of their group: completion order)
    indices = train_data["sample_indices"]
    rows_per_rollout = Counter(indices)
    assert indices == sorted(indices) and set(rows_per_rollout) == set(range(6))
    assert sorted(rows_per_rollout.values()) == [1, 1, 1, 1, 2, 2]
    assert {index // 2 for index, rows in rows_per_rollout.items() if rows == 2} == {0, 1}
    assert output.metrics == {
        "agentcore/succeeded": 2,
        "agentcore/agent_error": 1,
        "agentcore/timed_out": 1,
        "agentcore/dispatch_failed": 1,
        "agentcore/cancelled": 1,
        "agentcore/sampled_tokens": 11,
        "agentcore/trained_tokens": 11,
        "agentcore/rows": 5,
    }
    # and each group was one GRPO group of ours, with slime's sampling parameters under their _rollout names
    assert sorted(sum(r.input_id == q.input_id for q in agents.requests) for r in agents.requests) == [2] * 6
    assert agents.requests[0].rollout["sampling_params"] == {
        "temperature": 0.7,
        "top_p": 1.0,
        "top_k": -1,
        "max_tokens": 16,
    }


def test_truncation_per_row_and_the_mask_policy(tmp_path, agents):
    rows = [_scripted(("succeeded", "two_rows", 1.0), ("agent_error", "two_rows", 0.0))]
    config = _unit_config(agentcore_failure_policy="mask")
    args = slime_args(tmp_path, rows, "--rollout-max-response-len", "1", config=config)
    thread = agents.serve_in_thread(2)
    output = backend_slime.generate_rollout(args, 4, rollout_manager(args).data_source)
    thread.join(10)
    ((first, second),) = output.samples
    cut, failed = (first, second) if first[0].status is Sample.Status.TRUNCATED else (second, first)  # completion order
    # each row is cut to --rollout-max-response-len, its mask and log probs with it
    assert [(s.status, s.tokens, s.loss_mask, s.rollout_log_probs) for s in cut] == [
        (Sample.Status.TRUNCATED, [5, 6, 7], [1], [-0.1]),
        (Sample.Status.TRUNCATED, [5, 6, 7, 9, 8], [1], [-0.3]),
    ]
    assert [(s.status, s.reward, s.remove_sample) for s in failed] == [(Sample.Status.FAILED, 0.0, True)] * 2
    # 8 tokens sampled, 2 trained: the cut ones and the masked failure's are not
    assert (output.metrics["agentcore/sampled_tokens"], output.metrics["agentcore/trained_tokens"]) == (8, 2)


async def test_the_per_sample_hook_forwards_slimes_sampling_and_leaves_a_missing_reward_to_slime(tmp_path, agents):
    rows = [_scripted(("succeeded", "length", None), ("succeeded", "none", 1.0))]
    args = slime_args(tmp_path, rows, config=_unit_config())
    (group,) = rollout_manager(args).data_source.get_samples(1)
    group[0].session_id = str(uuid.uuid4())  # slime's routing key, set before its hook runs
    # what slime's GenerateState passes: sampling plus its detokenization options
    sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_new_tokens": 8, "stop": None}
    sampling |= {"skip_special_tokens": False, "no_stop_trim": True, "spaces_between_special_tokens": False}
    thread = agents.serve_in_thread(1)
    (sample,) = await backend_slime.generate(args, group[0], sampling)
    thread.join(10)
    assert (sample.status, sample.reward, sample.tokens) == (Sample.Status.TRUNCATED, None, [5, 7, 7, 7])
    assert (agents.requests[0].input_id, agents.requests[0].session_id) == ("slime-group-0", group[0].session_id)
    assert agents.requests[0].rollout["sampling_params"] == {
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": -1,
        "max_tokens": 8,
    }


async def test_the_per_sample_hook_gives_slimes_loop_every_row_and_its_evaluation_the_last(tmp_path, agents):
    rows = [_scripted(*[("succeeded", "two_rows", 1.0)] * 4)]
    args = slime_args(tmp_path, rows, config=_unit_config())
    (group,) = rollout_manager(args).data_source.get_samples(1)
    thread = agents.serve_in_thread(4)
    # slime's loop takes a list of samples from a custom generate function: one per row, one rollout id
    first, second = await backend_slime.generate(args, group[0], {})
    assert (first.tokens, second.tokens) == ([5, 6, 7, 2], [5, 6, 7, 9, 8, 2])
    assert first.rollout_id == second.rollout_id == group[0].index
    # its evaluation (which passes evaluation=True) counts each rollout once: the last row
    (last,) = await backend_slime.generate(args, group[1], {}, evaluation=True)
    assert last.tokens == [5, 6, 7, 9, 8, 2] and last.metadata["agentcore"]["row"] == 1
    # with static micro-batches on four ranks (Megatron's data_parallel_size) the rollout fills them with masked rows
    args.data_parallel_size = 4
    rows = await backend_slime.generate(args, group[1], {})
    assert [(sum(s.loss_mask), s.remove_sample, s.rollout_id) for s in rows] == [
        (2, False, group[1].index),
        (2, False, group[1].index),
        (0, True, group[1].index),
        (0, True, group[1].index),
    ]
    # without our reward hook two rows are refused, naming the flag
    args.custom_reward_post_process_path = None
    with pytest.raises(ValueError, match="--custom-reward-post-process-path"):
        await backend_slime.generate(args, copy.deepcopy(group[0]), {})
    thread.join(10)


def test_slimes_router_becomes_the_gateways_worker_unless_turned_off(tmp_path, agents, monkeypatch):
    registered: list[tuple[Any, list[str], str]] = []
    monkeypatch.setattr(
        backend_slime._workers,
        "register_inference_servers",
        lambda client, urls, *, framework: registered.append((client, list(urls), framework)),
    )
    rows = [_scripted(("succeeded", "one_row", 1.0), ("succeeded", "one_row", 0.0))]
    # GIVEN slime's args without a router (as in these tests): nothing to register
    args = slime_args(tmp_path, rows, config=_unit_config())
    manager = rollout_manager(args)
    thread = agents.serve_in_thread(4)
    backend_slime.generate_rollout(args, 0, manager.data_source)
    assert registered == []
    # WHEN slime started its router THEN its /v1 URL is registered with the experiment's client
    args.sglang_router_ip, args.sglang_router_port = "10.0.0.7", 30000
    backend_slime.generate_rollout(args, 1, manager.data_source)
    thread.join(10)
    assert registered == [(backend_slime.SlimeSettings.from_args(args).client(), ["http://10.0.0.7:30000/v1"], "slime")]
    # AND agentcore_register_servers: false turns it off
    args.agentcore_register_servers = False
    thread = agents.serve_in_thread(2)
    backend_slime.generate_rollout(args, 2, manager.data_source)
    thread.join(10)
    assert len(registered) == 1


def test_router_replay_hands_slime_each_rows_routing_and_staleness_comes_from_the_traces(tmp_path, agents):
    # GIVEN slime's R3 replay on, and a group served by a MoE policy whose weights moved during one rollout
    rows = [_scripted(("succeeded", "two_rows_moe", 1.0), ("succeeded", "one_row_moe", 0.0))]
    args = slime_args(tmp_path, rows, "--use-rollout-routing-replay", config=_unit_config())
    manager = rollout_manager(args)
    thread = agents.serve_in_thread(2)
    # WHEN step 5 runs
    output = backend_slime.generate_rollout(args, 5, manager.data_source)
    thread.join(10)
    # THEN the gateway was told the step's weight version
    assert agents.reported_versions == [5]
    samples = [sample for group in output.samples for rollout in group for sample in rollout]
    assert len(samples) == 3
    for sample in samples:
        # every row carries the routing of every token slime feeds but the last, as the server routed them
        assert sample.rollout_routed_experts.tolist() == [_route(t, i) for i, t in enumerate(sample.tokens)][:-1]
    # AND each row lists the versions that served its calls and how many trained tokens each sampled
    assert sorted(tuple(sample.weight_versions) for sample in samples) == [("3",), ("4",), ("4", "4")]
    by_version = sorted((sample.metadata["agentcore"]["tokens_by_version"] for sample in samples), key=str)
    assert by_version == [{"3": 2}, {"4": 2}, {"4": 4}]
    # AND the step's staleness is token by token: 2 tokens 5 - 3 = 2 steps behind, 6 tokens 5 - 4 = 1
    assert (output.metrics["agentcore/staleness_p50"], output.metrics["agentcore/staleness_max"]) == (1, 2)


def test_router_replay_is_refused_before_any_rollout_when_the_servers_return_no_routing(tmp_path, agents):
    # GIVEN slime's R3 replay on, and servers behind the gateway that return no routing
    agents.served_call = TRACES["one_row"][0]
    rows = [_scripted(("succeeded", "one_row_moe", 1.0), ("succeeded", "one_row_moe", 0.0))]
    args = slime_args(tmp_path, rows, "--use-rollout-routing-replay", config=_unit_config())
    manager = rollout_manager(args)
    # WHEN slime asks for a step: it is refused, naming the servers' flag, before any rollout is submitted
    with pytest.raises(
        RoutingUnavailableError,
        match=f"--use-rollout-routing-replay is on, but a one-token call through the token gateway at {GATEWAY} came "
        "back without per-token expert routing.*SGLang: --enable-return-routed-experts",
    ):
        backend_slime.generate_rollout(args, 0, manager.data_source)
    assert agents.requests == []
    # AND slime's per-sample hook is refused alike
    with pytest.raises(RoutingUnavailableError, match="--use-rollout-routing-replay is on"):
        asyncio.run(backend_slime.generate(args, manager.data_source.get_samples(1)[0][0], {}))
    assert agents.requests == []


def test_router_replay_without_routing_from_the_server_names_the_server_flag(tmp_path, agents):
    rows = [_scripted(("succeeded", "one_row", 1.0), ("succeeded", "one_row", 0.0))]
    args = slime_args(tmp_path, rows, "--use-rollout-routing-replay", config=_unit_config())
    manager = rollout_manager(args)
    thread = agents.serve_in_thread(2)
    with pytest.raises(RoutingUnavailableError, match="--use-rollout-routing-replay is on.*--enable-return-routed"):
        backend_slime.generate_rollout(args, 0, manager.data_source)
    thread.join(10)


def test_settings_say_what_is_missing_and_evaluation_says_what_to_use_instead(tmp_path):
    args = slime_args(tmp_path, [_scripted()], config={})
    with pytest.raises(ValueError, match="agentcore_experiment: NAME"):
        backend_slime.SlimeSettings.from_args(args)
    args = slime_args(tmp_path, [_scripted()], config=_unit_config(agentcore_failure_policy="retry"))
    with pytest.raises(ValueError, match="agentcore_failure_policy"):
        backend_slime.SlimeSettings.from_args(args)
    # slime's --eval-function-path defaults to the rollout function: its first evaluation says what to set
    manager = rollout_manager(slime_args(tmp_path, [_scripted()], "--eval-interval", "5", config=_unit_config()))
    with pytest.raises(NotImplementedError, match="--eval-function-path"):
        manager.eval(0)
