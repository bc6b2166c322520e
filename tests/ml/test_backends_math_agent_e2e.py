"""Each framework at its default sampling parameters, through its adapter, to the example math agent.

One local stack (moto, ACR emulator hosting ``examples/math_agent``, workers, the stand-in math model, the
token gateway) on the README's experiment; each framework configured exactly as the README says
(``examples/math_agent/backends/``):

- verl: its V1 worker (``AgentLoopWorkerTQ``) on its composed ``ppo_trainer`` config sends its default
  ``temperature/top_p/top_k/repetition_penalty/logprobs`` through our loop;
- slime: its ``RolloutManager`` on its argument defaults sends ``temperature/top_p/top_k``;
- rLLM's ``UnifiedTrainer`` and ART's ``make_session`` forward none (their own gateways apply theirs): the
  rollouts succeed without.

Before ``agent_app.openai_sampling_kwargs`` the verl and slime rollouts all ended ``agent_error``
(``create() got an unexpected keyword argument 'top_k'``).
"""

from __future__ import annotations

import asyncio
import shlex
import sys
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("verl")
TESTS = Path(__file__).parents[1]
sys.path[:0] = [
    str(Path(__file__).parent),
    str(TESTS / "backends"),
    str(TESTS / "stand_ins" / "rllm"),
]

with warnings.catch_warnings():  # verl and Ray warn at import about their own dependencies
    warnings.simplefilter("ignore")
    import numpy as np
    import verl.trainer.ppo.v1.agent_loop_tq as agent_loop_tq
    from verl.utils import tensordict_utils as tu
    from verl_support import MemoryTransferQueue, model_dir, trainer_config

from agentcore_rl_toolkit.aws_tools.persistent_dict import NullPersister, PersistentDict  # noqa: E402
from agentcore_rl_toolkit.rollout_session.factory import make_session  # noqa: E402
from backends_e2e import shared_test_client  # noqa: E402
from rllm_engine import run_one  # noqa: E402
from slime_support import README_EXPERIMENT, REPO, rollout_manager, slime_args  # noqa: E402

from examples.math_agent.dataset import synthetic  # noqa: E402
from examples.math_agent.local import MATH_AGENT  # noqa: E402
from local_stack.stack import LocalStack  # noqa: E402
from trainer_client import RolloutClient  # noqa: E402
from trainer_client.backends import rllm as backend_rllm  # noqa: E402

pytestmark = pytest.mark.e2e

BACKENDS = REPO / "examples" / "math_agent" / "backends"
PROBLEMS = synthetic(2, seed=11)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    settings = MATH_AGENT.settings(
        run_dir=tmp_path_factory.mktemp("stack"),
        experiments=(README_EXPERIMENT,),
        sweep_interval_s=1.0,
        # rLLM's engine uses this gateway as its own and its client sends no key, nor do ART's loops (their api_key
        # is their gateway's session id): this stack's gateway is open, as one behind the network alone is (D100).
        gateway_open=True,
    )
    with LocalStack(settings) as running, pytest.MonkeyPatch.context() as env:
        for name, value in running.env.items():
            env.setenv(name, value)
        yield running


@pytest.fixture
def client(stack: LocalStack, monkeypatch: pytest.MonkeyPatch) -> Iterator[RolloutClient]:
    monkeypatch.chdir(REPO)  # the README's relative paths
    with shared_test_client(README_EXPERIMENT) as shared:
        yield shared


@pytest.fixture
def new_results(client: RolloutClient):
    """The results stored during the test (the stack is shared by the module's tests)."""
    before = {result.session_id for result in client.results()}
    return lambda: [result for result in client.results() if result.session_id not in before]


async def test_verls_default_sampling_through_its_v1_worker(new_results, tmp_path, monkeypatch):
    # GIVEN verl's worker on its composed config with the README's overrides, two math prompts, n=2
    config = trainer_config(
        "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=2", model_dir=model_dir(tmp_path)
    )
    store = MemoryTransferQueue()
    monkeypatch.setattr(agent_loop_tq, "tq", store)
    worker = agent_loop_tq.AgentLoopWorkerTQ.__ray_actor_class__(config, None)
    columns = {
        "raw_prompt": np.array([[{"role": "user", "content": p["prompt"]}] for p in PROBLEMS], dtype=object),
        "reward_model": np.array([{"ground_truth": p["answer"]} for p in PROBLEMS], dtype=object),
        "index": np.arange(len(PROBLEMS)),
        "uid": np.array([f"verl-{i}" for i in range(len(PROBLEMS))], dtype=object),
    }
    batch = tu.get_tensordict(columns)
    tu.assign_non_tensor_data(batch, "global_steps", 1)
    # WHEN it runs the step
    await worker.generate_sequences(batch)
    await asyncio.gather(*worker.background_tasks)
    # THEN every rollout succeeded, with verl's defaults as sent, top_k and repetition_penalty among them
    fields = [store.rows[("train", key)]["extra_fields"] for key in store.keys("train")]
    assert {f["rollout_status"] for f in fields} == {"succeeded"}
    results = new_results()
    assert [result.status.value for result in results] == ["succeeded"] * 4
    sent = results[0].payload["_rollout"]["sampling_params"]
    assert sent == {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}


def test_slimes_default_sampling_through_its_rollout_manager(new_results, tmp_path):
    # GIVEN slime's argument defaults plus the README's flags and YAML, two math prompts of two samples
    args = slime_args(tmp_path, [{"prompt": p["prompt"], "answer": p["answer"]} for p in PROBLEMS])
    args.agentcore_rollout_timeout_s = 120
    # WHEN slime runs a step and converts it to training data
    train_data, metrics = rollout_manager(args).generate(0)
    # THEN every rollout succeeded with slime's defaults as sent, and slime trains on every token they sampled
    results = new_results()
    assert metrics["agentcore/succeeded"] == 4 and [result.status.value for result in results] == ["succeeded"] * 4
    assert metrics["agentcore/trained_tokens"] == metrics["agentcore/sampled_tokens"] > 0
    assert results[0].payload["_rollout"]["sampling_params"] == {"temperature": 1.0, "top_p": 1.0, "top_k": -1}
    assert all(sum(mask) > 0 for mask in train_data["loss_masks"])


async def test_rllms_unified_trainer_and_arts_loops_forward_no_sampling(new_results, stack):
    # GIVEN rLLM's UnifiedTrainer on the README's overrides, and ART's session from the README's YAML
    from hydra import compose, initialize_config_module
    from rllm.trainer.unified_trainer import UnifiedTrainer

    class NoTrainingBackend:
        """What rLLM's UnifiedTrainer asks of a backend before it picks its remote runtime; trains nothing."""

        def __init__(self, config: Any, **kwargs: Any) -> None:
            self.config = config

        def validate_config(self) -> None:
            pass

        def init_rollout_engine(self, **kwargs: Any) -> None:
            return None

    backend_rllm.install()
    host, port = str(stack.gateway_url).removeprefix("http://").split(":")
    overrides = [arg for arg in shlex.split((BACKENDS / "rllm.sh").read_text()) if "=" in arg]
    overrides += [f"rllm.gateway.host={host}", f"rllm.gateway.port={port}"]  # the stack's gateway as rLLM's
    with initialize_config_module(config_module="rllm.trainer.config", version_base=None):
        trainer = UnifiedTrainer(NoTrainingBackend, compose(config_name="unified", overrides=overrides))
    trainer._remote_runtime.initialize()  # what fit_async does first
    art_backend = yaml.safe_load((BACKENDS / "art_rollout_session.yaml").read_text())["rollout_session_backend"]
    session_url = lambda sid: f"{stack.gateway_url}/sessions/{sid}/v1"  # noqa: E731

    async def art_verl_loop(problem: dict[str, Any]) -> Any:
        """What ART's verl loop does: {**payload, _config} through make_session."""
        sid = str(uuid.uuid4())
        session = make_session(sid, art_backend, PersistentDict({"session_id": sid}, persister=NullPersister()))
        task = {**problem, "_config": {"base_url": session_url(sid), "model_id": "policy", "api_key": sid}}
        async with session:
            await session.setup(task)
            return await session.run(task)

    tasks = [{"prompt": p["prompt"], "answer": p["answer"]} for p in PROBLEMS]
    try:
        # WHEN rLLM's engine and ART's loop run a prompt each
        (rllm_result, _, _), art_dump = await asyncio.gather(
            run_one(trainer._remote_runtime, trainer._gateway, tasks[0], "rllm-0", 120), art_verl_loop(tasks[1])
        )
    finally:
        trainer.shutdown()
    # THEN both succeed, and no sampling parameters were added to the agents' rollouts
    assert rllm_result.finished and art_dump.is_successful()
    results = new_results()
    assert [result.status.value for result in results] == ["succeeded"] * 2
    assert all("sampling_params" not in result.payload["_rollout"] for result in results)
