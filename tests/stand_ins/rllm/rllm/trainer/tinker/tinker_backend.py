"""Stand-in of ``rllm.trainer.tinker.tinker_backend``: ``TinkerBackend``, the ``UnifiedTrainer`` backend on Tinker.

Rewritten from rLLM 9beb6e0f: a ``tinker.ServiceClient(base_url=tinker_base_url)``; the tokenizer
``AutoTokenizer.from_pretrained(model.name)``; a ``TinkerEngine`` on ``model.name`` with ``data.max_prompt_length``,
``data.max_response_length``, ``training.max_length``, ``rllm.rollout`` as its sampling parameters and the
``rollout_engine`` block as keyword arguments; ``on_train_start`` takes the first sampling client; each batch is
interleaved ``rllm.rollout.n`` times and run by the workflow engine; ``process_backend_batch`` makes the datums and
runs ``forward_backward``, ``update_policy`` one Adam ``optim_step`` (``training.learning_rate``, ``beta1``,
``beta2``, ``eps``); ``on_batch_end`` syncs the sampler (``on_policy_updated``: a checkpoint every
``rllm.trainer.save_freq`` steps) and adds the metrics, ``train/kl_sample_train_v1`` (mean |sampler - trainer|
logprob over the sampled tokens) and ``_v2`` among them. Added here (not rLLM's): ``train/logprob_max_abs_diff``,
the largest of those differences; ``shutdown`` closes the service client. Left out: images, validation's own
group size handling beyond ``rllm.rollout.n_val``, fused forward-backward and optimizer step.
"""

import logging
import os
import uuid

import tinker
import torch
from transformers import AutoTokenizer

from rllm.engine.rollout.tinker_engine import TinkerEngine
from rllm.trainer.algorithms import simple_timer
from rllm.trainer.tinker.tinker_policy_trainer import TinkerPolicyTrainer

logger = logging.getLogger(__name__)


def interleave_tasks(batch, group_size):
    """Each task ``group_size`` times in a row, one task id per task (rLLM's ``rllm.data.utils``)."""
    tasks, task_ids = [], []
    for task in batch:
        task_id = str(uuid.uuid4())
        tasks += [task] * group_size
        task_ids += [task_id] * group_size
    return tasks, task_ids


def compute_kl_and_entropy_metrics(training_datums, training_logprobs):
    diffs = []
    for datum, trainer in zip(training_datums, training_logprobs, strict=True):
        mask = datum.loss_fn_inputs["mask"].to_torch() > 0
        sampled = datum.loss_fn_inputs["logprobs"].to_torch()
        if mask.any():
            diffs.append((sampled[mask] - trainer[mask]).abs())
    if not diffs:
        return {}
    flat = torch.cat(diffs)
    return {
        "train/kl_sample_train_v1": flat.mean().item(),
        "train/kl_sample_train_v2": 0.5 * (flat**2).mean().item(),
        "train/logprob_max_abs_diff": flat.max().item(),
    }


class TinkerBackend:
    name = "tinker"
    requires_loop = True

    def __init__(self, config, **kwargs):
        self.config = config
        self.full_config = config
        self.service_client = tinker.ServiceClient(base_url=config.tinker_base_url)
        self.policy_trainer = None
        self.tokenizer = None
        self.rollout_engine = None
        self.sampling_client = None
        self._algorithm_config = None
        self._policy_updated_this_step = False
        self.learning_rate = config.training.get("learning_rate", 1e-6)
        self.beta1 = config.training.get("beta1", 0.9)
        self.beta2 = config.training.get("beta2", 0.95)
        self.eps = config.training.get("eps", 1e-8)

    def init_rollout_engine(self, **kwargs):
        self.policy_trainer = TinkerPolicyTrainer(
            config=self.full_config, service_client=self.service_client, algorithm_config=kwargs.get("algorithm_config")
        )
        self.tokenizer = AutoTokenizer.from_pretrained(self.full_config.model.name)
        self.rollout_engine = TinkerEngine(
            base_url=self.full_config.tinker_base_url,
            model_name=self.full_config.model.name,
            service_client=self.service_client,
            tokenizer=self.tokenizer,
            max_prompt_length=self.full_config.data.max_prompt_length,
            max_response_length=self.full_config.data.max_response_length,
            max_model_length=self.full_config.training.max_length,
            sampling_params=self.full_config.rllm.rollout,
            **self.full_config.rollout_engine,
            image_processor=None,
        )
        return self.rollout_engine

    def validate_config(self):
        for split in ("train", "val"):
            params = self.full_config.rllm.rollout.get(split, {}) or {}
            if params.get("temperature", 1.0) != 1.0 or params.get("top_p", 1.0) != 1.0:
                logger.warning("rllm.rollout.%s.{temperature,top_p} are set away from 1.0", split)
        router_replay = self.full_config.rllm.algorithm.get("router_replay", "disabled")
        if router_replay != "disabled":
            raise ValueError(f"router_replay={router_replay!r} is not supported by the Tinker backend.")

    def shutdown(self):
        self.service_client.close("success").result()

    async def generate_episodes(self, batch, agent_workflow_engine, is_validation=False, **kwargs):
        self.rollout_engine.set_sampling_client(self.sampling_client)
        group_size = self.full_config.rllm.rollout.n_val if is_validation else self.full_config.rllm.rollout.n
        tasks, task_ids = interleave_tasks(batch, group_size)
        return await agent_workflow_engine.execute_tasks(tasks, task_ids, is_validation=is_validation, **kwargs)

    def transform_to_backend_batch(self, trainer_state, **kwargs):
        return []

    async def process_backend_batch(self, trainer_state, **kwargs):
        with simple_timer("forward_backward", trainer_state.timing_dict):
            datums, logprobs, metrics = await self.policy_trainer.forward_backward_from_trajectory_groups(
                trainer_state.trajectory_groups, algorithm_config=self._algorithm_config
            )
        trainer_state.backend_batch = datums
        trainer_state.extra_info["training_logprobs"] = logprobs
        trainer_state.metrics.update(metrics)

    async def compute_advantages(self, trainer_state, algorithm_config, **kwargs):
        self._algorithm_config = algorithm_config

    async def update_policy(self, trainer_state, **kwargs):
        with simple_timer("optim_step", trainer_state.timing_dict):
            future, learning_rate = await self.policy_trainer.optim_step_future(
                step=trainer_state.global_step,
                total_steps=trainer_state.total_steps,
                learning_rate=self.learning_rate,
                beta1=self.beta1,
                beta2=self.beta2,
                eps=self.eps,
            )
            await future.result_async()
            trainer_state.extra_info["scheduled_learning_rate"] = learning_rate

    async def on_train_start(self, trainer_state):
        os.makedirs(self.full_config.training.default_local_dir, exist_ok=True)
        trainer_state.global_step, self.sampling_client, _ = await self.policy_trainer.initialize_async()
        self.rollout_engine.set_sampling_client(self.sampling_client)

    async def on_train_end(self, trainer_state):
        if trainer_state.global_step % self.full_config.rllm.trainer.save_freq != 0:
            await self.policy_trainer.save_checkpoint_and_get_sampling_client(trainer_state.global_step, do_save=True)

    async def on_policy_updated(self, trainer_state):
        self._policy_updated_this_step = True
        save_freq = self.full_config.rllm.trainer.save_freq
        do_save = save_freq > 0 and trainer_state.global_step % save_freq == 0
        self.sampling_client = await self.policy_trainer.save_checkpoint_and_get_sampling_client(
            trainer_state.global_step, do_save=do_save
        )
        self.rollout_engine.set_sampling_client(self.sampling_client)

    async def on_batch_end(self, trainer_state):
        if not self._policy_updated_this_step:
            with simple_timer("save_checkpoint", trainer_state.timing_dict):
                await self.on_policy_updated(trainer_state)
        self._policy_updated_this_step = False
        metrics = trainer_state.metrics
        metrics["optim/lr"] = trainer_state.extra_info.get("scheduled_learning_rate", self.learning_rate)
        metrics["progress/batch"] = trainer_state.global_step
        metrics.update({f"time/{key}": value for key, value in trainer_state.timing_dict.items()})
        if trainer_state.backend_batch:
            metrics.update(
                compute_kl_and_entropy_metrics(
                    trainer_state.backend_batch, trainer_state.extra_info["training_logprobs"]
                )
            )
