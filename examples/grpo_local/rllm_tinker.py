"""The closed loop through rLLM's Tinker backend: the lookup task on the local stack, trained by rLLM's trainer.

``PYTHONPATH=<an rLLM tree> .venv-ml/bin/python -m examples.grpo_local.rllm_tinker [--steps N]`` brings the local
stack up with the tiny policy behind the Tinker API and the lookup agent, then runs rLLM's ``UnifiedTrainer`` with
its ``TinkerBackend`` (``examples/math_agent/backends/rllm_tinker_train.py``, the launcher ``rllm_tinker.sh`` runs)
on the same Hydra config and overrides, pointed at the tiny policy: ``model.name`` is the tiny policy's Hugging Face
tokenizer directory (the name the endpoint serves it under), ``rollout_engine.renderer_name`` its tinker-cookbook
renderer (``local_stack.tiny_policy.cookbook``), the rows the lookup task's, registered as rLLM's dataset
``lookup``. The agents' calls go through the stack's token gateway (rLLM's gateway here) to rLLM's Tinker engine;
each step is rLLM's ``forward_backward`` (GRPO's ``ppo`` loss) and ``optim_step`` on the endpoint, then a sampler
sync. Writes rLLM's metrics (``metrics.jsonl``, its file logger) and ``rllm_tinker_local.png`` (reward mean and the
largest trainer-sampler logprob gap per step) to ``--output-dir``; the last line printed is one JSON summary.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from examples.grpo_local.task import episode_payloads
from examples.grpo_local.tinker import LoopSettings, loop_main, loop_summary
from examples.grpo_local.train import EXPERIMENT, plot_steps
from local_stack._process import environment
from local_stack.stack import LocalStack

__all__ = ["main", "overrides", "run"]

#: The rLLM dataset the lookup rows are registered as.
DATASET = "lookup"


def overrides(settings: LoopSettings, *, model: Path, endpoint: str, gateway: str) -> list[str]:
    """The Hydra overrides of one run: ``rllm_tinker.sh``'s keys, with the tiny policy's values."""
    from local_stack.tiny_policy.cookbook import RENDERER_NAME

    host, port = gateway.removeprefix("http://").split(":")
    return [
        "rllm/backend=tinker",
        f"+dataset={DATASET}",
        f"tinker_base_url={endpoint}",
        f"model.name={model}",
        "model.lora_rank=1",
        f"rollout_engine.renderer_name={RENDERER_NAME}",
        f"training.group_size={settings.samples}",
        "validation.group_size=1",
        f"training.learning_rate={settings.learning_rate}",
        "training.max_length=512",
        f"training.default_local_dir={settings.output_dir / 'checkpoints'}",
        "training.resume_mode=disable",
        "data.max_prompt_length=256",
        f"data.max_response_length={settings.max_tokens}",
        f"rllm.data.max_response_length={settings.max_tokens}",
        f"rllm.data.train_batch_size={settings.prompts}",
        "rllm.algorithm.adv_estimator=grpo",
        "rllm.algorithm.norm_adv_by_std_in_grpo=true",
        "rllm.trainer.total_epochs=1",
        f"rllm.trainer.total_batches={settings.steps}",
        f"rllm.trainer.save_freq={settings.steps}",
        "rllm.trainer.logger=['console','file']",
        "rllm.trainer.project_name=grpo-local",
        f"rllm.trainer.experiment_name={EXPERIMENT}",
        "rllm.remote_runtime.enabled=true",
        "rllm.remote_runtime.backend=agentcore_events",
        f"+rllm.remote_runtime.agentcore.experiment={EXPERIMENT}",
        "rllm.remote_runtime.session_timeout=60",
        f"rllm.gateway.host={host}",
        f"rllm.gateway.port={port}",
    ]


def run(settings: LoopSettings, out: Any = sys.stdout) -> dict[str, Any]:
    """Train for ``settings.steps`` steps; return the summary (also printed as the last line)."""
    from hydra import compose, initialize_config_module

    from examples.math_agent.backends.rllm_tinker_train import train
    from local_stack.tiny_policy.cookbook import register, save_tokenizer

    started = time.monotonic()
    output_dir = settings.output_dir
    output_dir.mkdir(parents=True, exist_ok=True)
    model = save_tokenizer(output_dir / "tiny-policy")
    register()
    log = output_dir / "metrics.jsonl"
    # rLLM's gateway client sends no key: the stack's gateway, rLLM's here, is open (D100)
    stack_settings = settings.stack_settings(str(model), gateway_open=True)
    out.write(f"starting the local stack with the Tinker endpoint (logs in {settings.run_dir}/) ...\n")
    # rLLM's TinkerBackend reads its key from TINKER_API_KEY; the local endpoint takes any
    env = {"RLLM_HOME": str(output_dir / "rllm"), "VERL_FILE_LOGGER_PATH": str(log), "TINKER_API_KEY": "tml-local"}
    with LocalStack(stack_settings) as stack, environment({**stack.env, **env}):
        from rllm.data.dataset import DatasetRegistry

        rows = episode_payloads(settings.steps * settings.prompts, seed=settings.seed)
        DatasetRegistry.register_dataset(DATASET, rows, "train")
        args = overrides(
            settings, model=model, endpoint=str(stack.model_url).removesuffix("/v1"), gateway=str(stack.gateway_url)
        )
        with initialize_config_module(config_module="rllm.trainer.config", version_base=None):
            train(compose(config_name="unified", overrides=args))
    history = [_step(json.loads(line)) for line in log.read_text(encoding="utf-8").splitlines()]
    plot = plot_steps(
        history,
        output_dir / "rllm_tinker_local.png",
        title="rLLM's Tinker backend on the local stack: tiny transformer, lookup task",
        lower=("logprob_max_abs_diff", "max |trainer - sampler logprob|"),
    )
    summary = loop_summary(history, started=started, plot=plot, log=log)
    out.write(json.dumps(summary) + "\n")
    return summary


def _step(line: dict[str, Any]) -> dict[str, Any]:
    """One step of rLLM's file log, with the fields the plot and summary read."""
    data = line["data"]
    return {
        "step": line["step"],
        "reward_mean": data.get("reward/default/mean", 0.0),
        "logprob_max_abs_diff": data.get("train/logprob_max_abs_diff"),
        **data,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m examples.grpo_local.rllm_tinker``: train, exit 1 if the trained tokens' logprobs were not exact."""
    prog, description = "python -m examples.grpo_local.rllm_tinker", __doc__.split("\n\n")[0]
    return loop_main(argv, prog=prog, description=description, name="rllm-tinker-local", train=run)


if __name__ == "__main__":
    raise SystemExit(main())
