"""The Tinker adapter's config: the README's file, ART ``tinker_api``'s keys where they mean the same, and the
keys our stack replaces refused with what replaces them."""

import json
from pathlib import Path

import pytest

from trainer_client.backends.tinker import REPLACED_KEYS, TinkerConfig

REPO = Path(__file__).parents[2]

#: ART 0.2.0's ``backends/tinker_api/examples/math_agent/config.json.example``, key for key.
ART_EXAMPLE = {
    "endpoint": "http://GPU_NODE_PRIVATE_IP:18080",
    "base_model": "/models/Qwen3.5-4B",
    "tokenizer": "Qwen/Qwen3.5-4B",
    "chat_template_kwargs": {"enable_thinking": False},
    "dataset": "/path/to/gsm8k-train.jsonl",
    "evaluation_dataset": "/path/to/gsm8k-test.jsonl",
    "agent_runtime_arn": "arn:aws:bedrock-agentcore:us-west-2:ACCOUNT:runtime/RUNTIME_ID",
    "gateway_host": "CPU_NODE_PRIVATE_IP",
    "gateway_port": 0,
    "history_mode": "linear",
    "output_dir": "/path/to/run-output",
    "steps": 50,
    "batch_size": 64,
    "group_size": 4,
    "tps_limit": 4,
    "rollout_timeout": 180,
    "evaluation_batch_size": 256,
    "evaluation_temperature": 0.6,
    "evaluation_interval": 10,
    "checkpoint_interval": 20,
    "lora_rank": 32,
    "learning_rate": 0.00001,
    "max_new_tokens": 2048,
    "max_context_tokens": 16384,
    "wandb_project": "agentcore_tinker",
}


def test_the_readme_config_reads():
    config = TinkerConfig.from_mapping(json.loads((REPO / "examples/math_agent/backends/tinker.json").read_text()))
    assert (config.experiment, config.batch_size, config.group_size, config.renderer) == ("gsm8k-grpo-1", 64, 4, "hf")


def test_arts_example_trains_here_once_the_keys_our_stack_replaces_are_dropped_and_experiment_named():
    with pytest.raises(ValueError, match="remove agent_runtime_arn, evaluation_batch_size") as refused:
        TinkerConfig.from_mapping({**ART_EXAMPLE, "experiment": "gsm8k"})
    assert "agent_runtime_arn: the experiment's runtime: give `experiment`" in str(refused.value)
    kept = {key: value for key, value in ART_EXAMPLE.items() if key not in REPLACED_KEYS}
    config = TinkerConfig.from_mapping({**kept, "experiment": "gsm8k"})
    assert (config.endpoint, config.tokenizer, config.chat_template_kwargs) == (
        "http://GPU_NODE_PRIVATE_IP:18080",
        "Qwen/Qwen3.5-4B",
        {"enable_thinking": False},
    )
    assert (config.lora_rank, config.learning_rate, config.max_new_tokens, config.max_context_tokens) == (
        32,
        1e-5,
        2048,
        16384,
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"group_size": 1}, "group_size"),
        ({"learning_rate": float("nan")}, "learning_rate"),
        ({"renderer": "no_such_module:Renderer"}, "No module named 'no_such_module'"),
    ],
)
def test_bad_values_say_which_setting(change, message):
    values = {"experiment": "e", "base_model": "m", "dataset": "d.jsonl", "output_dir": "out", **change}
    with pytest.raises((ValueError, ImportError), match=message):
        TinkerConfig.from_mapping(values).make_renderer()
