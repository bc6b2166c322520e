"""Stand-in of ``rllm.trainer.tinker.tinker_policy_trainer``: ``TinkerPolicyTrainer``.

Rewritten from rLLM 9beb6e0f: a fresh start creates a LoRA training client on ``model.name`` (``model.lora_rank``,
``train_unembed``/``train_attn``/``train_mlp``) and saves weights ``000000`` for the first sampling client; the loss
is ``rllm.algorithm.loss_fn``, else by estimator (``grpo`` -> ``ppo``, the others ``importance_sampling``); the
datums go to one ``forward_backward`` without their ``mask``; the trainer's logprobs come back per datum and its
metrics as ``train/<name>``; ``optim_step`` is Adam at the learning rate (schedule ``constant``); after an update
``save_weights_and_get_sampling_client``, or, when saving, ``save_state`` + ``save_weights_for_sampler`` named
``<step:06d>`` and ``global_step_<N>/checkpoint.json`` under ``training.default_local_dir``. Left out: resuming
(a checkpoint found is refused here), per-role datums, schedules other than ``constant``.
"""

import asyncio
import json
import os

import tinker
from omegaconf import OmegaConf
from tinker.types import AdamParams

from rllm.trainer.algorithms import AlgorithmConfig, rLLMAdvantageEstimator
from rllm.trainer.tinker.transform import transform_trajectory_groups_to_datums

ADV_TO_LOSS_FN_AUTO_MAP = {
    rLLMAdvantageEstimator.REINFORCE: "importance_sampling",
    rLLMAdvantageEstimator.REINFORCE_PLUS_PLUS_BASELINE: "importance_sampling",
    rLLMAdvantageEstimator.GRPO: "ppo",
    rLLMAdvantageEstimator.RLOO: "importance_sampling",
    rLLMAdvantageEstimator.OTHER: "importance_sampling",
}
DEFAULT_LOSS_FN = "importance_sampling"


class TinkerPolicyTrainer:
    def __init__(self, config, service_client, cf_config=None, transform_config=None, algorithm_config=None):
        self.config = config
        self.service_client = service_client
        self.training_client = None
        self.algorithm_config = algorithm_config or AlgorithmConfig.from_config(self.config.rllm.algorithm)

    async def initialize_async(self):
        tracker = os.path.join(self.config.training.default_local_dir, "latest_checkpointed_iteration.txt")
        if OmegaConf.select(self.config, "training.resume_mode", default="auto") != "disable" and os.path.exists(
            tracker
        ):
            raise NotImplementedError(
                f"the stand-in does not resume: remove {tracker} or set training.resume_mode=disable"
            )
        self.training_client = await self.service_client.create_lora_training_client_async(
            base_model=self.config.model.name,
            rank=self.config.model.lora_rank,
            train_unembed=OmegaConf.select(self.config, "model.train_unembed", default=True),
            train_attn=OmegaConf.select(self.config, "model.train_attn", default=True),
            train_mlp=OmegaConf.select(self.config, "model.train_mlp", default=True),
        )
        sampler = await (await self.training_client.save_weights_for_sampler_async(name="000000")).result_async()
        return 0, self.training_client.create_sampling_client(sampler.path), None

    async def forward_backward_from_trajectory_groups(self, trajectory_groups, algorithm_config=None):
        algorithm_config = algorithm_config or self.algorithm_config
        datums, metrics = transform_trajectory_groups_to_datums(trajectory_groups, algorithm_config=algorithm_config)
        loss_fn = algorithm_config.loss_fn or ADV_TO_LOSS_FN_AUTO_MAP.get(algorithm_config.estimator, DEFAULT_LOSS_FN)
        future = await self.training_client.forward_backward_async(
            [
                tinker.Datum(
                    model_input=d.model_input, loss_fn_inputs={k: v for k, v in d.loss_fn_inputs.items() if k != "mask"}
                )
                for d in datums
            ],
            loss_fn=loss_fn,
        )
        results = await asyncio.gather(future)
        training_logprobs = []
        for result in results:
            training_logprobs += [output["logprobs"].to_torch() for output in result.loss_fn_outputs]
            for key, value in (result.metrics or {}).items():
                if not key.startswith("clock_cycle"):
                    metrics[f"train/{key.replace(':', '/')}"] = value
        return datums, training_logprobs, metrics

    async def optim_step_future(self, step, total_steps, learning_rate, beta1=0.9, beta2=0.95, eps=1e-8):
        if self.algorithm_config.lr_schedule != "constant":
            raise NotImplementedError("the stand-in schedules the learning rate constant only")
        params = AdamParams(learning_rate=learning_rate, beta1=beta1, beta2=beta2, eps=eps)
        return await self.training_client.optim_step_async(params), learning_rate

    async def save_checkpoint_and_get_sampling_client(self, batch_idx, do_save=False, dataloader_state=None):
        if not do_save:
            return await self.training_client.save_weights_and_get_sampling_client_async()
        name = f"{batch_idx:06d}"
        state_path = (await (await self.training_client.save_state_async(name)).result_async()).path
        sampler_path = (await (await self.training_client.save_weights_for_sampler_async(name)).result_async()).path
        step_dir = os.path.join(self.config.training.default_local_dir, f"global_step_{batch_idx}")
        os.makedirs(step_dir, exist_ok=True)
        with open(os.path.join(step_dir, "checkpoint.json"), "w") as f:
            checkpoint = {"name": name, "state_path": state_path, "sampler_path": sampler_path}
            json.dump({**checkpoint, "dataloader_state": dataloader_state}, f)
        with open(os.path.join(self.config.training.default_local_dir, "latest_checkpointed_iteration.txt"), "w") as f:
            f.write(str(batch_idx))
        return self.training_client.create_sampling_client(sampler_path)
