"""``SlimeRunner``: ART's one-call slime launcher, on our rollout hooks.

ART (agentcore-rl-toolkit) documents ``SlimeRunner(exp_id=..., agent_runtime_arn=..., s3_bucket=...,
model_dir=..., data_path=..., model_type=...).train(num_rollout=...)``. This class takes the same values and
runs slime the way ART's runner does (``ray stop --force``, ``ray start --head``, slime's
``scripts/models/<model_type>.sh`` sourced for the model's flags, ``ray job submit -- python3 train.py ...``
through :mod:`subprocess`), with our hooks in slime's command line: ``--rollout-function-path
trainer_client.backends.slime.generate_rollout``, ``--custom-reward-post-process-path
trainer_client.backends.slime.post_process_rewards`` and a ``--custom-config-path`` YAML of our
``agentcore_*`` keys (:meth:`SlimeRunner.config`).

The experiment: ``experiment=`` (our name), or ART's ``exp_id``, which is the same name (an experiment is
deployed under its ``exp_id``). ART's ``agent_runtime_arn`` and ``s3_bucket`` are not needed (the
experiment's descriptor has them); when given they must be that experiment's: :meth:`SlimeRunner.train`
checks them against the descriptor before it starts anything.

Differences from ART's flags: no ``--use-dynamic-global-batch-size`` and no ``--megatron-to-hf-mode`` (slime
624b824a has neither: its ``global_batch_size`` counts rollouts, so rollouts of several samples need no
dynamic batch size), ``--label-key`` when ``label_key`` is set, and ART's gateway keys replaced by ours. ART
also kills every ``sglang`` process on the machine first (``pkill -9 sglang``); this runner does not.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["POST_PROCESS_PATH", "ROLLOUT_FUNCTION_PATH", "SlimeRunner"]

# Named, not imported: the launching process need not import slime (trainer_client.backends.slime does).
#: Our ``--rollout-function-path``.
ROLLOUT_FUNCTION_PATH = "trainer_client.backends.slime.generate_rollout"
#: Our ``--custom-reward-post-process-path``.
POST_PROCESS_PATH = "trainer_client.backends.slime.post_process_rewards"
#: Where ART's runner submits the job (the head ``ray start --head`` starts).
RAY_DASHBOARD = "http://127.0.0.1:8265"

Runner = Callable[..., Any]


@dataclass(kw_only=True)
class SlimeRunner:
    """One Python entry point for slime training on our rollouts (see the module docstring).

    Example:
        >>> SlimeRunner(
        ...     experiment="gsm8k-grpo-1",
        ...     model_dir="/root/Qwen2.5-3B-Instruct",
        ...     data_path="/root/gsm8k.jsonl",
        ...     model_type="qwen2.5-3B",
        ... ).train(num_rollout=100)

    Attributes are ART's (same names, same defaults) plus ``experiment``, ``region``, ``label_key`` and our
    rollout keys: ``rollout_timeout_s`` (ART's ``acr_timeout``), ``max_concurrent_sessions`` (ART's
    ``max_concurrent``), ``failure_policy``, ``payload_fn``, ``sampling_params``, ``register_servers``
    (:class:`trainer_client.backends.slime.SlimeSettings`).
    """

    model_dir: str
    data_path: str
    model_type: str
    experiment: str | None = None
    exp_id: str | None = None
    agent_runtime_arn: str | None = None
    s3_bucket: str | None = None
    region: str | None = None

    num_gpus: int = 8
    tp_size: int = 2
    rollout_gpus_per_engine: int = 2
    slime_dir: str = "/root/slime"
    megatron_dir: str = "/root/Megatron-LM"

    model_id: str | None = None
    rollout_timeout_s: float = 900.0
    max_concurrent_sessions: int | None = None
    failure_policy: str = "zero_reward"
    payload_fn: str | None = None
    sampling_params: Mapping[str, Any] = field(default_factory=dict)
    register_servers: bool = True

    input_key: str = "prompt"
    label_key: str | None = None
    rollout_batch_size: int = 32
    n_samples_per_prompt: int = 8
    rollout_max_response_len: int = 1024
    rollout_temperature: float = 1.0
    lr: float = 1e-6
    eps_clip: float = 0.2
    eps_clip_high: float = 0.28
    weight_decay: float = 0.1
    adam_beta2: float = 0.98
    sglang_mem_fraction_static: float = 0.7
    sglang_context_length: int | None = None
    sglang_tool_call_parser: str = "qwen"
    sglang_reasoning_parser: str | None = None
    sglang_data_parallel_size: int = 1
    max_tokens_per_gpu: int = 9216
    wandb_project: str | None = None
    wandb_group: str | None = None
    extra_flags: list[str] = field(default_factory=list)

    @property
    def experiment_name(self) -> str:
        """Our experiment: ``experiment``, else ART's ``exp_id``.

        Raises:
            ValueError: neither given, or both and different.
        """
        if self.experiment and self.exp_id and self.experiment != self.exp_id:
            raise ValueError(
                f"experiment={self.experiment!r} and exp_id={self.exp_id!r} name two experiments: give one"
            )
        name = self.experiment or self.exp_id
        if not name:
            raise ValueError("SlimeRunner needs the experiment: experiment=NAME (or ART's exp_id=NAME)")
        return name

    def config(self) -> dict[str, Any]:
        """The ``--custom-config-path`` YAML's keys (slime sets each on its ``args``); unset ones left out."""
        values = {
            "experiment": self.experiment_name,
            "region": self.region,
            "model_id": self.model_id,
            "rollout_timeout_s": self.rollout_timeout_s,
            "max_concurrent_sessions": self.max_concurrent_sessions,
            "failure_policy": self.failure_policy,
            "payload_fn": self.payload_fn,
            "sampling_params": dict(self.sampling_params) or None,
            "register_servers": self.register_servers,
        }
        return {f"agentcore_{key}": value for key, value in values.items() if value is not None}

    def flags(self, *, num_rollout: int, model_args: Sequence[str], config_path: str) -> list[str]:
        """slime's ``train.py`` flags: the model script's ``model_args``, then ART's flags with our hooks."""
        flags = [*model_args]
        flags += ["--hf-checkpoint", self.model_dir, "--ref-load", self.model_dir, "--prompt-data", self.data_path]
        flags += ["--num-rollout", str(num_rollout), "--tensor-model-parallel-size", str(self.tp_size)]
        flags += ["--rollout-num-gpus-per-engine", str(self.rollout_gpus_per_engine), "--input-key", self.input_key]
        if self.label_key is not None:
            flags += ["--label-key", self.label_key]
        flags += ["--rollout-batch-size", str(self.rollout_batch_size)]
        flags += ["--n-samples-per-prompt", str(self.n_samples_per_prompt)]
        flags += ["--rollout-max-response-len", str(self.rollout_max_response_len)]
        flags += ["--rollout-temperature", str(self.rollout_temperature)]
        flags += ["--advantage-estimator", "grpo", "--use-kl-loss", "--kl-loss-type", "low_var_kl"]
        flags += ["--eps-clip", str(self.eps_clip), "--eps-clip-high", str(self.eps_clip_high)]
        flags += ["--lr", str(self.lr), "--lr-decay-style", "constant", "--weight-decay", str(self.weight_decay)]
        flags += ["--adam-beta2", str(self.adam_beta2), "--optimizer-cpu-offload", "--overlap-cpu-optimizer-d2h-h2d"]
        flags += ["--use-precision-aware-optimizer", "--sequence-parallel"]
        flags += ["--sglang-mem-fraction-static", str(self.sglang_mem_fraction_static)]
        flags += ["--sglang-cuda-graph-max-bs", "32", "--sglang-tool-call-parser", self.sglang_tool_call_parser]
        flags += ["--sglang-log-level", "warning", "--sglang-log-level-http", "warning"]
        flags += ["--attention-dropout", "0.0", "--hidden-dropout", "0.0", "--accumulate-allreduce-grads-in-fp32"]
        flags += ["--attention-softmax-in-fp32", "--attention-backend", "flash"]
        flags += ["--actor-num-gpus-per-node", str(self.num_gpus), "--colocate"]
        flags += ["--rollout-function-path", ROLLOUT_FUNCTION_PATH]
        flags += ["--custom-reward-post-process-path", POST_PROCESS_PATH, "--custom-config-path", config_path]
        flags += ["--use-dynamic-batch-size", "--max-tokens-per-gpu", str(self.max_tokens_per_gpu)]
        if self.sglang_reasoning_parser:
            flags += ["--sglang-reasoning-parser", self.sglang_reasoning_parser]
        if self.sglang_context_length is not None:
            flags += ["--sglang-context-length", str(self.sglang_context_length)]
        flags += ["--sglang-data-parallel-size", str(self.sglang_data_parallel_size)]
        if os.environ.get("WANDB_API_KEY"):
            flags.append("--use-wandb")
            if self.wandb_project:
                flags += ["--wandb-project", self.wandb_project]
            if self.wandb_group:
                flags += ["--wandb-group", self.wandb_group]
        return flags + list(self.extra_flags)

    def runtime_env(self) -> dict[str, Any]:
        """The Ray job's runtime env: Megatron on ``PYTHONPATH``, one CUDA connection (Megatron's tensor
        parallelism), and the W&B keys of this environment."""
        env = {"PYTHONPATH": self.megatron_dir, "CUDA_DEVICE_MAX_CONNECTIONS": "1"}
        env |= {key: os.environ[key] for key in ("WANDB_API_KEY", "WANDB_ENTITY") if os.environ.get(key)}
        return {"env_vars": env}

    def command(self, *, num_rollout: int, model_args: Sequence[str], config_path: str) -> list[str]:
        """The ``ray job submit`` command line that runs slime's ``train.py`` with :meth:`flags`."""
        return [
            "ray",
            "job",
            "submit",
            f"--address={RAY_DASHBOARD}",
            f"--runtime-env-json={json.dumps(self.runtime_env())}",
            "--",
            "python3",
            str(Path(self.slime_dir) / "train.py"),
            *self.flags(num_rollout=num_rollout, model_args=model_args, config_path=config_path),
        ]

    def check_experiment(self) -> None:
        """Check ART's ``agent_runtime_arn`` / ``s3_bucket``, when given, against the experiment's descriptor.

        Raises:
            ValueError: one is not the experiment's.
            trainer_client.ExperimentNotFoundError: no such experiment.
        """
        if not (self.agent_runtime_arn or self.s3_bucket):
            return
        from trainer_client._aws import load_descriptor

        descriptor = load_descriptor(self.experiment_name, region=self.region)
        for name, given, actual in (
            ("agent_runtime_arn", self.agent_runtime_arn, descriptor.runtime_arn),
            ("s3_bucket", self.s3_bucket, descriptor.results_bucket),
        ):
            if given and given != actual:
                raise ValueError(
                    f"{name}={given!r} but experiment {self.experiment_name!r} uses {actual!r}: leave {name} out "
                    "(the experiment's descriptor has it) or name the experiment that uses it"
                )

    def model_args(self, runner: Runner | None = None) -> list[str]:
        """``MODEL_ARGS`` of slime's ``scripts/models/<model_type>.sh`` (``runner``: :func:`subprocess.run`'s
        signature, default :func:`subprocess.run`).

        Raises:
            FileNotFoundError: the script failed and there is no such script under ``slime_dir``.
        """
        script = Path(self.slime_dir) / "scripts" / "models" / f"{self.model_type}.sh"
        try:
            printed = (runner or subprocess.run)(
                ["bash", "-c", f'source "{script}" && printf "%s\\0" "${{MODEL_ARGS[@]}}"'],
                check=True,
                capture_output=True,
            ).stdout
        except subprocess.CalledProcessError as exc:
            if not script.exists():
                raise FileNotFoundError(
                    f"slime model script not found: {script}; check slime_dir={self.slime_dir!r} and "
                    f"model_type={self.model_type!r}"
                ) from exc
            raise
        return [item.decode() for item in printed.split(b"\0") if item]

    def train(self, num_rollout: int = 1, *, runner: Runner | None = None) -> None:
        """Run the training job and wait for it: check the experiment, restart Ray's head, submit slime.

        ``runner`` runs each command (:func:`subprocess.run`'s signature; default :func:`subprocess.run`).
        """
        run = runner or subprocess.run
        self.check_experiment()
        model_args = self.model_args(run)
        run(["ray", "stop", "--force"], check=False)
        run(["ray", "start", "--head", "--num-gpus", str(self.num_gpus), "--disable-usage-stats"], check=True)
        with self._config_file() as config_path:
            run(self.command(num_rollout=num_rollout, model_args=model_args, config_path=config_path), check=True)

    @contextlib.contextmanager
    def _config_file(self) -> Iterator[str]:
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="slime-agentcore-", delete=False) as file:
            json.dump(self.config(), file)  # JSON is YAML
        try:
            yield file.name
        finally:
            Path(file.name).unlink(missing_ok=True)
