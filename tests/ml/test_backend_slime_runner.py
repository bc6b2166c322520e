"""``SlimeRunner``: the README's call builds the command line slime gets, and its flags parse with slime's argument
table into ``args`` our hooks accept (the stand-ins or the real slime tree, ``slime_support``)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
TESTS = Path(__file__).parents[1]
sys.path[:0] = [str(TESTS / "trainer_client")]

from slime_support import REPO, arguments, parse_args  # noqa: E402, I001
from trainer_support import BUCKET, RUNTIME_ARN, aws_env, create_experiment  # noqa: E402, F401

from trainer_client.backends import slime as backend_slime  # noqa: E402
from trainer_client.backends.slime_runner import POST_PROCESS_PATH, ROLLOUT_FUNCTION_PATH, SlimeRunner  # noqa: E402

MODEL_ARGS = ["--num-layers", "36", "--hidden-size", "2048", "--rotary-base", "1000000"]
#: Flags of the runner's command line that are not slime's own: Megatron's and SGLang's (their parsers take them).
NOT_SLIMES = {
    "--tensor-model-parallel-size",
    "--lr-decay-style",
    "--weight-decay",
    "--adam-beta2",
    "--optimizer-cpu-offload",
    "--overlap-cpu-optimizer-d2h-h2d",
    "--use-precision-aware-optimizer",
    "--sequence-parallel",
    "--attention-dropout",
    "--hidden-dropout",
    "--accumulate-allreduce-grads-in-fp32",
    "--attention-softmax-in-fp32",
    "--attention-backend",
    "--num-layers",
    "--hidden-size",
    "--rotary-base",
    "--sglang-mem-fraction-static",
    "--sglang-cuda-graph-max-bs",
    "--sglang-tool-call-parser",
    "--sglang-log-level",
    "--sglang-log-level-http",
    "--sglang-data-parallel-size",
}


def _readme_snippet() -> str:
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("### slime (rollout function)\n") : readme.index("### rLLM (remote runtime)\n")]
    (snippet,) = [
        block for block in re.findall(r"```python\n(.*?)```\n", section, re.DOTALL) if "SlimeRunner(" in block
    ]
    return snippet


class _Commands:
    """Stands in for ``subprocess.run``: records each command, prints the model script's ``MODEL_ARGS``, and reads
    the ``--custom-config-path`` file while the job "runs" (the runner deletes it after)."""

    def __init__(self) -> None:
        self.commands: list[list[str]] = []
        self.config: dict[str, Any] = {}

    def __call__(self, command: list[str], **kwargs: Any) -> subprocess.CompletedProcess:
        self.commands.append(command)
        stdout = b""
        if command[0] == "bash":
            stdout = b"".join(word.encode() + b"\0" for word in MODEL_ARGS)
        if "--custom-config-path" in command:
            self.config = json.loads(Path(command[command.index("--custom-config-path") + 1]).read_text())
        return subprocess.CompletedProcess(command, 0, stdout=stdout)


def test_the_readme_call_submits_slime_with_our_hooks_the_way_arts_runner_does(monkeypatch):
    # GIVEN the README's SlimeRunner call, exactly, with subprocess replaced
    commands = _Commands()
    monkeypatch.setattr(subprocess, "run", commands)
    # WHEN it runs
    exec(compile(_readme_snippet(), "README.md", "exec"), {})
    # THEN the model script is sourced, Ray's head restarted and slime's train.py submitted as a Ray job
    source, stop, start, submit = commands.commands
    assert source[:2] == ["bash", "-c"] and '"/root/slime/scripts/models/qwen2.5-3B.sh"' in source[2]
    assert stop == ["ray", "stop", "--force"]
    assert start == ["ray", "start", "--head", "--num-gpus", "8", "--disable-usage-stats"]
    dashed = submit.index("--")
    assert submit[:4] == ["ray", "job", "submit", "--address=http://127.0.0.1:8265"]
    runtime_env = json.loads(submit[4].removeprefix("--runtime-env-json="))
    assert runtime_env["env_vars"]["PYTHONPATH"] == "/root/Megatron-LM"
    assert submit[dashed + 1 : dashed + 3 + len(MODEL_ARGS)] == ["python3", "/root/slime/train.py", *MODEL_ARGS]
    flags = submit[dashed + 3 :]
    # with our hooks, the job's data and ART's defaults
    pairs = dict(zip(flags, [*flags[1:], None], strict=True))
    assert pairs["--rollout-function-path"] == ROLLOUT_FUNCTION_PATH
    assert pairs["--custom-reward-post-process-path"] == POST_PROCESS_PATH
    assert (pairs["--hf-checkpoint"], pairs["--prompt-data"], pairs["--label-key"]) == (
        "/root/Qwen2.5-3B-Instruct",
        "/root/gsm8k.jsonl",
        "answer",
    )
    assert (pairs["--num-rollout"], pairs["--rollout-batch-size"], pairs["--n-samples-per-prompt"]) == (
        "100",
        "32",
        "8",
    )
    assert "--use-dynamic-batch-size" in flags and "--use-dynamic-global-batch-size" not in flags
    # and our keys in the --custom-config-path YAML
    assert commands.config == {
        "agentcore_experiment": "gsm8k-grpo-1",
        "agentcore_model_id": "Qwen/Qwen2.5-3B-Instruct",
        "agentcore_rollout_timeout_s": 900.0,
        "agentcore_failure_policy": "zero_reward",
        "agentcore_payload_fn": "examples.math_agent.payloads.from_slime_sample",
        "agentcore_register_servers": True,
    }
    assert not Path(pairs["--custom-config-path"]).exists()


def test_the_flags_parse_with_slimes_argument_table_into_args_our_hooks_accept(tmp_path):
    runner = SlimeRunner(
        exp_id="gsm8k-grpo-1",
        model_dir="/models/qwen",
        data_path="/data/gsm8k.jsonl",
        model_type="qwen2.5-3B",
        label_key="answer",
        failure_policy="mask",
        sampling_params={"top_p": 0.9},
    )
    config = tmp_path / "agentcore.yaml"
    config.write_text(json.dumps(runner.config()))
    flags = runner.flags(num_rollout=3, model_args=MODEL_ARGS, config_path=str(config))
    # every flag is slime's own but Megatron's and SGLang's, which slime's own parsers take
    _, unknown = arguments.slime_parser().parse_known_args(flags)
    assert {word for word in unknown if word.startswith("--")} == NOT_SLIMES
    args = parse_args(flags)
    assert (args.rollout_function_path, args.custom_reward_post_process_path) == (
        ROLLOUT_FUNCTION_PATH,
        backend_slime.POST_PROCESS_PATH,
    )
    assert (args.num_rollout, args.rollout_batch_size, args.n_samples_per_prompt, args.label_key) == (
        3,
        32,
        8,
        "answer",
    )
    assert (args.use_dynamic_batch_size, args.max_tokens_per_gpu) == (True, 9216)
    settings = backend_slime.SlimeSettings.from_args(args)
    assert (settings.experiment, settings.failure_policy, settings.sampling_params) == (
        "gsm8k-grpo-1",
        "mask",
        {"top_p": 0.9},
    )
    assert (settings.rollout_timeout_s, settings.register_servers) == (900.0, True)


def test_arts_runtime_arn_and_bucket_must_be_the_experiments():
    create_experiment("gsm8k-grpo-1")
    art = {"model_dir": "/m", "data_path": "/d.jsonl", "model_type": "qwen2.5-3B", "exp_id": "gsm8k-grpo-1"}
    SlimeRunner(**art, agent_runtime_arn=RUNTIME_ARN, s3_bucket=BUCKET).check_experiment()
    commands = _Commands()
    with pytest.raises(ValueError, match="s3_bucket='other-bucket' but experiment 'gsm8k-grpo-1' uses 'results-test'"):
        SlimeRunner(**art, agent_runtime_arn=RUNTIME_ARN, s3_bucket="other-bucket").train(runner=commands)
    assert commands.commands == []  # nothing started
    with pytest.raises(ValueError, match="name two experiments"):
        _ = SlimeRunner(**art, experiment="other").experiment_name
    with pytest.raises(ValueError, match="experiment=NAME"):
        _ = SlimeRunner(**{**art, "exp_id": None}).experiment_name
