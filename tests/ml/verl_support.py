"""Real verl pieces for the verl adapter's tests: a tokenizer, the trainer config, the loop as verl builds it."""

from __future__ import annotations

from typing import Any

import hydra.utils
from omegaconf import OmegaConf
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker, DictConfigWrap, ToolListWrap

WORDS = ["<pad>", "<eos>", "<unk>", "user", "assistant", "system", "what", "is", "2", "+", "?"]
PROMPT_LENGTH = 64
RESPONSE_LENGTH = 48
#: The entry a user puts in the file ``actor_rollout_ref.rollout.agent.agent_loop_config_path`` names.
LOOP_ENTRY = {"name": "agentcore", "_target_": "trainer_client.backends.verl.AgentCoreAgentLoop"}


def tokenizer() -> PreTrainedTokenizerFast:
    """A real Hugging Face fast tokenizer with a chat template, built offline from a word-level vocabulary."""
    model = Tokenizer(models.WordLevel({word: i for i, word in enumerate(WORDS)}, unk_token="<unk>"))
    model.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=model, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    tok.chat_template = (
        "{% for m in messages %}{{ m['role'] }} {{ m['content'] }} {% endfor %}"
        "{% if add_generation_prompt %}assistant {% endif %}"
    )
    return tok


def trainer_config(
    use_v1: bool = True, prompt_length: int = PROMPT_LENGTH, response_length: int = RESPONSE_LENGTH
) -> Any:
    """The part of verl's trainer config agent loops read."""
    return OmegaConf.create(
        {
            "trainer": {"use_v1": use_v1},
            "actor_rollout_ref": {"rollout": {"prompt_length": prompt_length, "response_length": response_length}},
            "data": {},
        }
    )


def build_loop(entry: dict[str, Any], config: Any, tok: PreTrainedTokenizerFast) -> Any:
    """Instantiate a registry entry the way ``AgentLoopWorker._run_agent_loop`` does."""
    return hydra.utils.instantiate(
        config=OmegaConf.create(entry),
        trainer_config=DictConfigWrap(config=config),
        server_manager=None,
        tokenizer=tok,
        processor=None,
        hf_model_type=None,
        dataset_cls=None,
        data_config=DictConfigWrap(config.data),
        tools=ToolListWrap([]),
    )


def legacy_worker(config: Any, tok: PreTrainedTokenizerFast) -> AgentLoopWorker:
    """verl's own (V0) worker, without Ray or servers, to run its real post-processing on our outputs."""
    worker = object.__new__(AgentLoopWorker)
    worker.config = config
    worker.rollout_config = config.actor_rollout_ref.rollout
    worker.tokenizer = tok
    worker.processor = None
    worker.reward_loop_worker_handles = None
    worker.distillation_enabled = False
    worker.mm_processor_kwargs = {}
    return worker
