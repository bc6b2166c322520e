"""The verl agent loop against verl 0.9.1's real types, its composed default config and its own post-processing.

No Ray, no GPU: verl's V1 worker and trainer code run on :class:`verl_support.MemoryTransferQueue`.
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl")
sys.path.insert(0, str(Path(__file__).parent))

with warnings.catch_warnings():  # verl and Ray warn at import about their own dependencies
    warnings.simplefilter("ignore")
    import numpy as np
    import torch
    import verl.trainer.ppo.v1.agent_loop_tq as agent_loop_tq
    import verl.trainer.ppo.v1.trainer_base as trainer_base
    from hydra.errors import InstantiationException
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
    from verl.utils import tensordict_utils as tu
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict
    from verl.workers.rollout.llm_server import LLMServerClient
    from verl_support import (
        LOOP_ENTRY,
        VERL_COMMAND,
        MemoryTransferQueue,
        ServerIds,
        build_loop,
        legacy_worker,
        model_dir,
        tokenizer,
        trainer_config,
    )

    from trainer_client.backends import verl as verl_backend
    from trainer_client.backends.verl import (
        LEGACY_TRAINER_WARNING,
        AgentCoreAgentLoop,
        FailurePolicy,
        RolloutFailedError,
        default_payload,
        to_outputs,
    )

from rollout_contract import ErrorInfo, ResultKey, Status, Timings
from trainer_client import ClientResult, PollSettings, TokenTrace
from trainer_client._future import RolloutFuture
from trainer_client.backends import _shared, _workers
from trainer_client.routing import RoutedExperts, RoutingUnavailableError

EXP = "verl-unit"
PROMPT_LENGTH = RESPONSE_LENGTH = 512  # verl's defaults (actor_rollout_ref.rollout.prompt_length / response_length)
ROW = {
    "raw_prompt": [{"role": "user", "content": "what is 2 + 2 ?"}],
    "uid": "prompt-7",
    "index": 7,
    "reward_model": {"ground_truth": "4"},
    "agent_name": "agentcore",
    "global_steps": 3,
    "session_id": 0,
}
#: Two calls that extend each other (one row), then one that re-rendered the history (a second row).
TRACES = [
    {"prompt_token_ids": [3, 6, 7], "completion_token_ids": [8, 1], "logprobs": [-0.5, -0.1]},
    {"prompt_token_ids": [3, 6, 7, 8, 1, 5, 9], "completion_token_ids": [10], "logprobs": [-0.2]},
    {"prompt_token_ids": [3, 6, 7, 8, 5, 9, 10], "completion_token_ids": [8, 1], "logprobs": [-0.3, -0.4]},
]


def result(status: Status = Status.SUCCEEDED, traces: list[dict[str, Any]] | None = None, reward=1.0) -> ClientResult:
    key = ResultKey(EXP, "prompt-7", str(uuid.uuid4()))
    if status is Status.SUCCEEDED:
        stored = ClientResult.from_handler_output(
            {"rewards": reward}, key=key, s3_bucket="b", payload={}, timings=Timings()
        )
    else:
        stored = ClientResult.terminal(status, key=key, s3_bucket="b", error=ErrorInfo(type="E", message="boom"))
    messages = [{"role": "user", "content": "q"}]
    stored.token_traces = [
        TokenTrace(trace_id=str(i), session_id=key.session_id, messages=messages * (i + 1), **trace)
        for i, trace in enumerate(traces or [])
    ]
    return stored


def outcome(res: ClientResult) -> _shared.RolloutOutcome:
    error = None if res.status is Status.SUCCEEDED else f"{res.status.value}: boom"
    return _shared.RolloutOutcome(res.status.value, res, error, 2.5)


def outputs(res: ClientResult, policy=FailurePolicy.ZERO_REWARD, **options) -> list[AgentLoopOutput]:
    return to_outputs(
        outcome(res),
        policy=policy,
        global_steps=3,
        prompt_ids=lambda: [3, 6, 7],
        pad_token_id=0,
        max_prompt_length=PROMPT_LENGTH,
        max_response_length=RESPONSE_LENGTH,
        **options,
    )


def experts(token: int, position: int) -> list[list[int]]:
    """A 2-layer top-2 router over 16 experts."""
    return [[(token + position) % 16, (token * 3 + layer) % 16] for layer in range(2)]


def with_routing(traces: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The traces as a server returning routed experts records them (every token fed but the last)."""
    routed = []
    for trace in traces:
        fed = (trace["prompt_token_ids"] + trace["completion_token_ids"])[:-1]
        routing = RoutedExperts.from_nested([experts(token, i) for i, token in enumerate(fed)])
        routed.append({**trace, "metadata": {"routed_experts": routing.model_dump()}})
    return routed


def test_router_replay_hands_verl_each_rows_routing_and_verl_places_it_on_the_sequence():
    # GIVEN a rollout whose calls came back with routing, and verl's router replay on
    first, second = outputs(result(traces=with_routing(TRACES)), routing_replay=True)
    # THEN each output carries the routing of its own tokens, prompt first
    for output in (first, second):
        sequence = output.prompt_ids + output.response_ids
        assert output.routed_experts.tolist() == [experts(t, i) for i, t in enumerate(sequence)][:-1]
    # AND verl's V1 conversion and its legacy padding take it (left-padded prompt: it starts where the prompt does)
    assert tuple(first.as_dict()["routed_experts"].shape) == (len(first.prompt_ids) + len(first.response_ids), 2, 2)
    worker = legacy_worker(trainer_config("trainer.use_v1=false"), tokenizer())
    internal = asyncio.run(worker._agent_loop_postprocess(first, False, raw_prompt=ROW["raw_prompt"]))
    start = PROMPT_LENGTH - len(first.prompt_ids)
    placed = internal.routed_experts[0, start : start + len(first.prompt_ids)].tolist()
    assert placed == [experts(t, i) for i, t in enumerate(first.prompt_ids)]
    # AND without replay nothing is handed over
    assert outputs(result(traces=with_routing(TRACES)))[0].routed_experts is None


def test_a_rollout_whose_calls_straddle_a_weight_push_reports_both_versions():
    # GIVEN a rollout whose first call the gateway recorded under version 3 and its later ones under 4
    versioned = [{**trace, "metadata": {"weight_version": 3 if i == 0 else 4}} for i, trace in enumerate(TRACES)]
    # THEN every output of it spans both (verl's staleness metrics and off-policy filters read these)
    spans = {
        (o.extra_fields["min_global_steps"], o.extra_fields["max_global_steps"])
        for o in outputs(result(traces=versioned))
    }
    assert spans == {(3, 4)}
    # AND a rollout whose traces carry no version falls back to the step that dispatched it
    assert outputs(result(traces=TRACES))[0].extra_fields["min_global_steps"] == 3  # ROW's global_steps


async def test_the_loop_reports_the_step_verl_synced_before_running_a_sample(fake_client, monkeypatch):
    fake_client(result(traces=TRACES))
    reported: list[tuple[int, str]] = []
    monkeypatch.setattr(
        verl_backend,
        "report_weight_version",
        lambda client, version, framework: reported.append((version, framework)),
    )
    loop = build_loop({**LOOP_ENTRY, "experiment": EXP}, trainer_config(), tokenizer())
    await loop.run({}, **{**ROW, "global_steps": 7})
    assert reported == [(7, "verl")]


async def test_router_replay_is_refused_before_any_rollout_when_the_servers_return_no_routing(fake_client, monkeypatch):
    # GIVEN verl's router replay on, and a gateway whose servers return no routing for a one-token call
    monkeypatch.setattr(_workers, "_routing_returned", set())
    monkeypatch.setattr(verl_backend, "report_weight_version", lambda client, version, framework: False)
    client = fake_client(result(traces=with_routing(TRACES)))
    client.gateway_url = "http://gateway.test:9000"
    client.probe_trace = TokenTrace(trace_id="p", session_id="p", **TRACES[0])
    config = trainer_config("actor_rollout_ref.rollout.enable_rollout_routing_replay=true")
    loop = build_loop({**LOOP_ENTRY, "experiment": EXP}, config, tokenizer())
    # WHEN verl runs the first sample: it is refused naming the servers' flag, and no rollout was submitted
    with pytest.raises(
        RoutingUnavailableError,
        match="enable_rollout_routing_replay is on, but a one-token call through the token gateway at "
        "http://gateway.test:9000 came back without per-token expert routing.*vLLM >= 0.22: "
        "--enable-return-routed-experts",
    ):
        await loop.run({}, **ROW)
    assert client.calls == []
    # AND once the servers return routing the check passes, once per process, and every sample runs
    client.probe_trace = TokenTrace(trace_id="p", session_id="p", **with_routing(TRACES)[0])
    for _ in range(2):
        outputs = await loop.run({}, **ROW)
        assert all(output.routed_experts is not None for output in outputs)
    assert (client.probes, len(client.calls)) == (2, 2)


def test_router_replay_without_routing_from_the_server_names_the_server_flag():
    with pytest.raises(
        RoutingUnavailableError, match="enable_rollout_routing_replay is on.*--enable-return-routed-experts"
    ):
        outputs(result(traces=TRACES), routing_replay=True)


def test_a_prefix_break_gives_two_real_outputs_with_mask_logprobs_and_reward():
    first, second = outputs(result(traces=TRACES, reward=0.75))
    assert (first.prompt_ids, first.response_ids) == ([3, 6, 7], [8, 1, 5, 9, 10])
    assert first.response_mask == [1, 1, 0, 0, 1]
    assert first.response_logprobs == [-0.5, -0.1, 0.0, 0.0, -0.2]
    assert (second.prompt_ids, second.response_ids, second.response_mask) == ([3, 6, 7, 8, 5, 9, 10], [8, 1], [1, 1])
    assert [o.reward_score for o in (first, second)] == [0.75, 0.75]
    assert (first.num_turns, second.num_turns) == (3, 4)  # messages of the row's last call + the answer
    assert first.extra_fields["rollout_status"] == "succeeded"


def test_verl_v1_converts_our_outputs_to_tensors_with_the_reward_on_the_last_token():
    # verl's V1 worker stores output.as_dict() per output
    fields = outputs(result(traces=TRACES[:2], reward=0.5))[0].as_dict()
    assert fields["responses"].tolist() == [8, 1, 5, 9, 10]
    assert fields["response_mask"].tolist() == [1, 1, 0, 0, 1]
    assert torch.allclose(fields["rollout_log_probs"], torch.tensor([-0.5, -0.1, 0.0, 0.0, -0.2]))
    assert fields["rm_scores"].tolist() == [0.0, 0.0, 0.0, 0.0, 0.5]


def test_verl_v1_stores_a_rollouts_rows_as_one_tensordict():
    # what AgentLoopWorkerTQ._agent_loop_postprocess builds per output before putting them in TransferQueue
    ours = outputs(result(traces=TRACES)) + outputs(result(Status.DISPATCH_FAILED))
    fields = []
    for output in ours:
        field = output.as_dict()
        field.update(uid=ROW["uid"], session_id=0, global_steps=ROW["global_steps"])
        field["loss_mask"] = field["response_mask"]
        fields.append(field)
    stored = list_of_dict_to_tensordict(fields)
    assert stored.batch_size == torch.Size([3])
    assert [row.tolist() for row in stored["responses"].unbind()] == [[8, 1, 5, 9, 10], [8, 1], [0]]
    assert [row.tolist() for row in stored["loss_mask"].unbind()] == [[1, 1, 0, 0, 1], [1, 1], [0]]


async def test_verl_legacy_worker_pads_and_batches_our_outputs_with_placeholders():
    # GIVEN a succeeded output and the placeholder of a failure without traces
    tok, config = tokenizer(), trainer_config("trainer.use_v1=false")
    worker = legacy_worker(config, tok)
    ours = outputs(result(traces=TRACES[:2])) + outputs(result(Status.DISPATCH_FAILED))
    # WHEN verl's own post-processing pads them and builds the batch
    internal = [await worker._agent_loop_postprocess(o, False, raw_prompt=ROW["raw_prompt"]) for o in ours]
    batch = worker._postprocess(internal)
    # THEN shapes are verl's, masks survive padding, and the placeholder trains nothing
    assert batch.batch["responses"].shape == (2, RESPONSE_LENGTH)
    assert batch.batch["response_mask"][0, :6].tolist() == [1, 1, 0, 0, 1, 0]
    assert batch.batch["response_mask"][1].sum().item() == 0
    assert batch.batch["rm_scores"][:, :5].tolist()[0] == [0.0, 0.0, 0.0, 0.0, 1.0]
    assert batch.batch["rm_scores"][1].sum().item() == 0.0


@pytest.mark.parametrize(
    ("policy", "expected_mask", "expected_reward"),
    [(FailurePolicy.ZERO_REWARD, [1, 1, 0, 0, 1], 0.0), (FailurePolicy.MASK, [0, 0, 0, 0, 0], 0.0)],
)
def test_a_failed_rollout_with_traces_scores_zero(policy, expected_mask, expected_reward):
    (out,) = outputs(result(Status.AGENT_ERROR, traces=TRACES[:2]), policy)
    assert (out.response_mask, out.reward_score) == (expected_mask, expected_reward)
    assert out.extra_fields["rollout_error"] == "agent_error: boom"


def test_a_failure_without_traces_is_a_masked_placeholder_or_dropped():
    (placeholder,) = outputs(result(Status.TIMED_OUT))
    assert (placeholder.prompt_ids, placeholder.response_ids, placeholder.response_mask) == ([3, 6, 7], [0], [0])
    assert placeholder.reward_score == 0.0
    assert outputs(result(Status.TIMED_OUT), FailurePolicy.DROP) == []


def test_the_default_payload_is_json_and_leaves_verl_internals_out():
    np = pytest.importorskip("numpy")
    payload = default_payload({**ROW, "raw_prompt": np.array(ROW["raw_prompt"], dtype=object), "index": np.int64(7)})
    assert payload == {"prompt": ROW["raw_prompt"], "index": 7, "reward_model": {"ground_truth": "4"}}


class _FakeClient:
    """Resolves every rollout at once with a prepared result (the local stack does this for real in e2e)."""

    poll_settings = PollSettings()
    gateway_url: str | None = None  # no gateway: nothing to register or report

    def __init__(self, res: ClientResult | list[ClientResult]) -> None:
        self.results = res if isinstance(res, list) else None
        self.res = res[0] if isinstance(res, list) else res
        self.calls: list[tuple[dict[str, Any], str, float, dict[str, Any]]] = []
        #: The trace the gateway records for a one-token call (the start-up routing check), and how many were made.
        self.probe_trace: TokenTrace | None = None
        self.probes = 0

    def probe_gateway(self) -> TokenTrace | None:
        self.probes += 1
        return self.probe_trace

    async def invoke_async(self, payload, session_id=None, input_id=None, timeout=0.0, **overrides):
        self.calls.append((payload, input_id, timeout, overrides))
        if self.results:  # the prepared results in turn
            self.res = self.results[(len(self.calls) - 1) % len(self.results)]
        future = RolloutFuture(ResultKey(EXP, input_id, self.res.session_id), "b", deadline_at=time.time() + timeout)
        future.set_result(self.res)
        return future


@pytest.fixture
def fake_client():
    def install(
        res: ClientResult | list[ClientResult], experiment: str = EXP, model_id: str | None = None
    ) -> _FakeClient:
        client = _FakeClient(res)
        _shared.shared_client(experiment, model_id=model_id, factory=lambda *args, **kwargs: client)
        return client

    yield install
    _shared._clients.clear()


@pytest.mark.parametrize("use_v1", [True, False])
async def test_the_loop_verl_instantiates_runs_one_rollout_in_the_rows_group(fake_client, use_v1, caplog, monkeypatch):
    # GIVEN the YAML entry a user registers, instantiated as verl does (twice: verl builds a loop per sample)
    monkeypatch.setattr(verl_backend, "_legacy_warned", False)
    client = fake_client(result(traces=TRACES))
    entry = {**LOOP_ENTRY, "experiment": EXP, "rollout_timeout_s": 90}
    with caplog.at_level("WARNING", "trainer_client.backends.verl"):
        loop = build_loop(entry, trainer_config(f"trainer.use_v1={use_v1}"), tokenizer())
        build_loop(entry, trainer_config(f"trainer.use_v1={use_v1}"), tokenizer())
    # THEN the legacy trainer's loss of early rows is said once, at start-up, and V1 says nothing
    ours = [r.getMessage() for r in caplog.records if r.name == "trainer_client.backends.verl"]
    assert ours == ([] if use_v1 else [LEGACY_TRAINER_WARNING])
    assert isinstance(loop, AgentCoreAgentLoop)
    # WHEN verl runs it on a dataset row
    out = await loop.run({"temperature": 1.0, "top_p": 1.0, "logprobs": True}, **ROW)
    # THEN one rollout was submitted in the row's group with verl's sampling params
    ((payload, input_id, timeout, overrides),) = client.calls
    assert (payload["prompt"], input_id, timeout) == (ROW["raw_prompt"], "prompt-7", 90.0)
    assert overrides == {"sampling_params": {"temperature": 1.0, "top_p": 1.0, "logprobs": True}}
    # and V1 gets every row (all 5 sampled tokens trained), the legacy trainer the last one (2 of 5)
    if use_v1:
        assert [o.response_ids for o in out] == [[8, 1, 5, 9, 10], [8, 1]]
        assert {(o.extra_fields["sampled_tokens"], o.extra_fields["trained_tokens"]) for o in out} == {(5, 5)}
    else:
        assert isinstance(out, AgentLoopOutput)
        assert (out.response_ids, out.extra_fields["rows_dropped"]) == ([8, 1], 1)
        assert (out.extra_fields["sampled_tokens"], out.extra_fields["trained_tokens"]) == (5, 2)


async def test_the_loop_gives_the_gateway_verls_rollout_servers_before_each_rollout(fake_client, monkeypatch):
    # GIVEN verl's server client over a load balancer that routes to two replicas (ids are host:port)
    fake_client(result(traces=TRACES))
    registered: list[tuple[list[str], str]] = []
    monkeypatch.setattr(
        verl_backend, "register_inference_servers", lambda client, urls, framework: registered.append((urls, framework))
    )
    balancer = ServerIds(["10.0.0.5:41001", "10.0.0.6:41002"])
    config = trainer_config()
    loop = build_loop({**LOOP_ENTRY, "experiment": EXP}, config, tokenizer(), LLMServerClient(config, balancer))
    # WHEN verl runs a sample, then its servers change (a replica replaced) and it runs another
    await loop.run({}, **ROW)
    balancer.servers = ["10.0.0.7:41003"]
    await loop.run({}, **ROW)
    # THEN the gateway was given each set of servers as OpenAI base URLs
    assert registered == [
        (["http://10.0.0.5:41001/v1", "http://10.0.0.6:41002/v1"], "verl"),
        (["http://10.0.0.7:41003/v1"], "verl"),
    ]
    # AND a loop told not to register leaves the gateway alone
    entry = {**LOOP_ENTRY, "experiment": EXP, "register_servers": False}
    await build_loop(entry, config, tokenizer(), LLMServerClient(config, balancer)).run({}, **ROW)
    assert len(registered) == 2


async def test_the_raise_policy_fails_the_sample_so_verl_marks_its_group(fake_client):
    fake_client(result(Status.AGENT_ERROR))
    loop = build_loop({**LOOP_ENTRY, "experiment": EXP, "failure_policy": "raise"}, trainer_config(), tokenizer())
    with pytest.raises(RolloutFailedError, match="agent_error: boom"):
        await loop.run({}, **ROW)


def test_drop_is_refused_with_the_legacy_trainer_which_needs_an_output_per_sample(fake_client):
    fake_client(result())
    entry = {**LOOP_ENTRY, "experiment": EXP, "failure_policy": "drop"}
    with pytest.raises(InstantiationException, match="trainer.use_v1=true"):  # hydra wraps the ValueError
        build_loop(entry, trainer_config("trainer.use_v1=false"), tokenizer())


async def test_a_placeholder_prompt_comes_from_the_chat_template(fake_client):
    fake_client(result(Status.DISPATCH_FAILED))
    tok = tokenizer()
    loop = build_loop({**LOOP_ENTRY, "experiment": EXP}, trainer_config(), tok)
    (out,) = await loop.run({}, **ROW)
    expected = tok.apply_chat_template(ROW["raw_prompt"], add_generation_prompt=True, tokenize=True, return_dict=False)
    assert out.prompt_ids == list(expected)
    assert (out.response_ids, out.response_mask, out.reward_score) == ([tok.pad_token_id], [0], 0.0)


GSM8K_ROWS = [
    {"raw_prompt": [{"role": "user", "content": "what is 2 + 2 ?"}], "reward_model": {"ground_truth": "4"}},
    {"raw_prompt": [{"role": "user", "content": "what is 2 ?"}], "reward_model": {"ground_truth": "2"}},
]


def _train_batch(step: int) -> Any:
    """What verl's V1 trainer hands its agent loop workers at ``step``: the dataloader's columns, a uid per
    prompt (``_fetch_one_gen_batch``) and ``global_steps`` (``_next_train_batch``)."""
    columns = {
        "raw_prompt": np.array([row["raw_prompt"] for row in GSM8K_ROWS], dtype=object),
        "reward_model": np.array([row["reward_model"] for row in GSM8K_ROWS], dtype=object),
        "data_source": np.array(["openai/gsm8k"] * len(GSM8K_ROWS), dtype=object),
        "index": np.arange(len(GSM8K_ROWS)),
        "uid": np.array([f"step{step}-prompt{i}" for i in range(len(GSM8K_ROWS))], dtype=object),
    }
    batch = tu.get_tensordict(columns)
    tu.assign_non_tensor_data(batch, "global_steps", step)
    return batch


async def test_verls_default_v1_trainer_runs_two_steps_of_our_outputs_through_its_worker_and_metrics(
    fake_client, tmp_path, monkeypatch
):
    # GIVEN verl's ppo_trainer composed with the README's overrides (V1 is its default) in a GRPO job of two
    # samples per prompt, the README's agent loop YAML registered by verl's own V1 worker, and every rollout
    # answering with three traces (two rows)
    job = ("algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=2")
    config = trainer_config(*job, model_dir=model_dir(tmp_path))
    assert config.trainer.use_v1 and config.actor_rollout_ref.rollout.agent.default_agent_loop == "agentcore"
    entry = OmegaConf.load(VERL_COMMAND.parent / "verl_agent_loop.yaml")[0]
    rewards = [result(traces=TRACES, reward=reward) for reward in (1.0, 0.0, 0.75, 0.25)]  # mean 0.5 a step
    client = fake_client(rewards, experiment=entry.experiment, model_id=entry.model_id)
    store = MemoryTransferQueue()
    monkeypatch.setattr(agent_loop_tq, "tq", store)
    monkeypatch.setattr(trainer_base, "tq", store)
    monkeypatch.chdir(VERL_COMMAND.parents[3])  # the README's relative agent_loop_config_path
    worker = agent_loop_tq.AgentLoopWorkerTQ.__ray_actor_class__(config, None)
    trainer = _v1_trainer(config)
    for step in (1, 2):
        if step == 2:  # the rollouts of step 2 straddle the push of its weights: their first call was served by 1's
            versioned = [{**t, "metadata": {"weight_version": 1 if i == 0 else 2}} for i, t in enumerate(TRACES)]
            client.results = [result(traces=versioned, reward=reward) for reward in (1.0, 0.0, 0.75, 0.25)]
        # WHEN verl's worker runs a step's prompts (rollout.n each) and its trainer computes advantages and metrics
        metrics: dict[str, Any] = {}
        timing: dict[str, float] = {}
        with trainer_base.marked_timer("step", timing):
            await worker.generate_sequences(_train_batch(step))
            await asyncio.gather(*worker.background_tasks)
            keys = [key for key in store.keys("train") if key.startswith(f"step{step}-")]
            tags = [store.tags[("train", key)] for key in keys]
            batch = trainer_base.KVBatchMeta(keys=keys, tags=tags, partition_id="train")
            _actor_log_probs(store, keys)
            batch = trainer_base.PPOTrainer._compute_advantage(trainer, batch, metrics)
        trainer_base.PPOTrainer._compute_metrics(trainer, batch, metrics, timing, global_steps=step, epoch=0)
        # THEN every output of the step (2 prompts x n=2 x 2 rows) carries the weight versions that served it: the
        # step's own (no version in the traces: the dispatching step), then 1 and 2 as the traces recorded
        assert len(keys) == 8
        served = (step, step) if step == 1 else (1, 2)
        assert {(tag["min_global_steps"], tag["max_global_steps"]) for tag in batch.tags} == {served}
        # AND verl's own step metrics show the staleness measured: step 2 trains tokens of step 1's weights
        assert metrics["training/off_policy/trajectory_spans/max"] == served[1] - served[0] + 1
        assert metrics["training/off_policy/trajectory_staleness/max"] == -1  # generated by this step's weights
        assert metrics["training/off_policy/trajectory_staleness_worst/max"] == (step - 1) - served[0]
        assert metrics["critic/score/mean"] == pytest.approx(0.5)
        # AND every row of a rollout trains with its rollout's one GRPO advantage
        advantages = store.kv_batch_get(keys, "train", ["advantages", "response_mask"])
        per_rollout: dict[str, set[float]] = {}
        for key, row, mask in zip(
            keys, advantages["advantages"].unbind(0), advantages["response_mask"].unbind(0), strict=True
        ):
            per_rollout.setdefault(key.rsplit("_", 1)[0], set()).update(row[mask.bool()].tolist())
        assert len(per_rollout) == 4 and all(len(values) == 1 for values in per_rollout.values())
        rollout_advantages = [values.pop() for values in per_rollout.values()]
        assert min(rollout_advantages) < 0 < max(rollout_advantages)  # the rollouts' rewards differ
    # AND verl's default sampling parameters reached the rollouts unchanged
    sampling = [overrides["sampling_params"] for *_, overrides in client.calls]
    assert sampling[0] == {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
    assert len(sampling) == 8 and all(params == sampling[0] for params in sampling)
    assert client.calls[0][0] == {"prompt": "what is 2 + 2 ?", "answer": "4"}  # the README's payload_fn


def _v1_trainer(config: Any) -> Any:
    """The trainer class verl's ``main_ppo`` picks (``trainer.v1.trainer_mode``), with the state its
    ``_compute_advantage`` and ``_compute_metrics`` read (its constructor starts Ray workers)."""
    import verl.trainer.ppo.v1.trainer_sync  # noqa: F401  (registers the "sync" trainer, as main_ppo imports it)

    trainer = object.__new__(trainer_base.get_trainer_cls(config.trainer.v1.trainer_mode))
    trainer.config = config
    trainer.use_critic = False
    trainer._rollout_moe_lb_metrics_accumulator = trainer_base.RolloutMoELoadBalanceMetricsAccumulator(
        model_config=config.actor_rollout_ref.model
    )
    trainer._get_n_gpus_for_throughput = lambda: 1
    return trainer


def _actor_log_probs(store: MemoryTransferQueue, keys: list[str]) -> None:
    """The actor's recomputed log probs (GPU work in verl), taken as the rollout's: an on-policy step."""
    rows = store.kv_batch_get(keys, "train", ["rollout_log_probs"])["rollout_log_probs"].unbind(0)
    store.kv_batch_put(keys, "train", fields=list_of_dict_to_tensordict([{"old_log_probs": r} for r in rows]))
