"""rLLM's Tinker backend on our rollouts: the launch file's config, the tiny policy's tokenizer and renderer, the loop.

rLLM's ``TinkerBackend`` samples through its ``TinkerEngine`` with the tinker-cookbook renderer
``rollout_engine.renderer_name`` names and the tokenizer ``AutoTokenizer.from_pretrained(model.name)`` loads; for the
tiny policy both come from our side (``local_stack.tiny_policy.cookbook``) and must give exactly the ids the served
policy samples from. End to end (``examples.grpo_local.rllm_tinker``: the local stack with the Tinker endpoint, the
lookup agent, rLLM's trainer from the stand-in, or a real rLLM tree with ``AGENTCORE_STAND_INS_RLLM``), three short
steps: every rollout ends ``env_done`` and is trained, and the logprobs Tinker's forward pass gives the trained
tokens match the sampler's within the closed loop's 1e-4 at every step, which after the first also shows that the
sampler was synced to the updated weights (a step at learning rate 4e-2 moves them far more). That the reward
rises takes longer runs than a test should (README, D103).
"""

import gc
import json
import shlex
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
tinker = pytest.importorskip("tinker")
pytest.importorskip("tinker_cookbook")

sys.path.insert(0, str(Path(__file__).parents[1] / "stand_ins" / "rllm"))
from rllm_tree import rllm_paths  # noqa: E402

sys.path[:0] = rllm_paths()

from examples.grpo_local.checks import LOGPROB_TOLERANCE  # noqa: E402
from local_stack.tiny_policy.chat_template import SPECIAL_TOKENS, ChatTokenizer  # noqa: E402
from local_stack.tiny_policy.cookbook import RENDERER_NAME, register, save_tokenizer  # noqa: E402

REPO = Path(__file__).parents[2]
LOOKUP = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}
STEPS = 3


def test_the_tiny_policys_hugging_face_tokenizer_has_the_chat_tokenizers_ids(tmp_path):
    from transformers import AutoTokenizer

    chat = ChatTokenizer()
    tokenizer = AutoTokenizer.from_pretrained(str(save_tokenizer(tmp_path / "tiny-policy")))
    text = "".join(chat.piece(index) for index in range(chat.vocab_size)) + "what is 7?\n" + "".join(SPECIAL_TOKENS)
    assert tokenizer.encode(text, add_special_tokens=False) == chat.encode(text)
    assert tokenizer.decode(chat.encode(text)) == text
    assert tokenizer.decode(chat.encode("7<|im_end|>"), skip_special_tokens=True) == "7"


def test_the_cookbook_renderer_builds_the_prompts_the_served_policy_samples_from(tmp_path):
    from tinker_cookbook import renderers
    from tinker_cookbook.renderers.base import ParseTermination
    from transformers import AutoTokenizer

    chat = ChatTokenizer()
    renderer = renderers.get_renderer(register(), AutoTokenizer.from_pretrained(str(save_tokenizer(tmp_path / "t"))))
    assert RENDERER_NAME == "tiny_policy"
    spec = {"name": "lookup", "description": "", "parameters": {}}

    def prompt(messages):
        built = renderer.build_generation_prompt(renderer.create_conversation_prefix_with_tools([spec]) + messages)
        return [token for chunk in built.chunks for token in chunk.tokens]

    user = {"role": "user", "content": "what is the secret? use lookup"}
    assert prompt([user]) == chat.render_prompt([user], [LOOKUP])
    call, termination = renderer.parse_response(chat.encode("ok<tool_call>"))
    assert termination == ParseTermination.STOP_SEQUENCE
    assert call["content"] == "ok" and [c.function.name for c in call["tool_calls"]] == ["lookup"]
    # The next turn extends the first prompt and the sampled tokens, token for token (one datum per rollout).
    turn = [user, {**call, "tool_calls": call["tool_calls"]}, {"role": "tool", "content": "7"}]
    openai_turn = [user, {"role": "assistant", "content": "ok", "tool_calls": [{}]}, {"role": "tool", "content": "7"}]
    assert prompt(turn) == chat.render_prompt(openai_turn, [LOOKUP])
    assert prompt(turn)[: len(prompt([user])) + 3] == prompt([user]) + chat.encode("ok<tool_call>")
    answer, termination = renderer.parse_response(chat.encode("7<|im_end|>"))
    assert (answer["content"], answer.get("tool_calls"), termination) == ("7", None, ParseTermination.STOP_SEQUENCE)
    assert renderer.parse_response(chat.encode("77"))[1] == ParseTermination.MALFORMED
    assert set(renderer.get_stop_sequences()) == set(chat.stop_ids)


def test_the_launch_file_composes_rllms_tinker_config_on_our_runtime():
    from hydra import compose, initialize_config_module

    launcher = REPO / "examples" / "math_agent" / "backends" / "rllm_tinker.sh"
    overrides = [arg for arg in shlex.split(launcher.read_text()) if "=" in arg]
    with initialize_config_module(config_module="rllm.trainer.config", version_base=None):
        config = compose(config_name="unified", overrides=overrides)
    assert config.rllm.backend == "tinker" and config.model.name == "Qwen/Qwen3-4B-Instruct-2507"
    assert config.rllm.rollout.n == config.training.group_size == 4  # rLLM's group size is the Tinker group's
    assert config.rllm.remote_runtime.backend == "agentcore_events"
    assert config.rllm.remote_runtime.agentcore.experiment == "gsm8k-grpo-1"
    assert config.rollout_engine.bypass_render_with_parser is False  # the cookbook renderer model.name chooses


@pytest.mark.e2e
def test_rllms_tinker_backend_trains_the_lookup_task_on_our_rollouts_token_exact(tmp_path, monkeypatch):
    from examples.grpo_local.rllm_tinker import run
    from examples.grpo_local.tinker import LoopSettings

    monkeypatch.chdir(tmp_path)  # rLLM writes relative paths where it runs
    out = tmp_path / "out"
    summary = run(LoopSettings(out, tmp_path / "stack", steps=STEPS, prompts=4, samples=4))
    # tinker 0.38 leaves the connection of a ServiceClient's first request to the garbage collector (the adapter's
    # tests see it too): collected here, it is this test's warning, not an unraisable at pytest's exit.
    gc.collect()
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == list(range(1, STEPS + 1))
    for line in lines:
        data = line["data"]
        assert data["batch/termination_reason/env_done"] == 1.0  # every rollout of the step ended as rLLM's done
        assert data["batch/dropped_malformed_sequences"] == 0  # every rollout had traces with logprobs
        assert data["train/logprob_max_abs_diff"] <= LOGPROB_TOLERANCE
        assert data["train/kl_sample_train_v1"] <= LOGPROB_TOLERANCE
        assert "train/loss/sum" in data and 0.0 <= data["reward/default/mean"] <= 1.0
    assert summary["token_exact"] and summary["steps"] == STEPS
    checkpoint = json.loads((out / "checkpoints" / f"global_step_{STEPS}" / "checkpoint.json").read_text())
    assert checkpoint["sampler_path"].startswith("tinker://")
    assert (out / "rllm_tinker_local.png").stat().st_size > 0
