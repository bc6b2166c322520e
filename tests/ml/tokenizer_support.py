"""A real Hugging Face tokenizer and model directory, built offline, for the framework tests (no weights)."""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

WORDS = ["<pad>", "<eos>", "<unk>", "user", "assistant", "system", "what", "is", "2", "+", "?"]


def tokenizer() -> PreTrainedTokenizerFast:
    """A fast tokenizer with a chat template, from a word-level vocabulary (unknown words are ``<unk>``)."""
    model = Tokenizer(models.WordLevel({word: i for i, word in enumerate(WORDS)}, unk_token="<unk>"))
    model.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=model, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    tok.chat_template = (
        "{% for m in messages %}{{ m['role'] }} {{ m['content'] }} {% endfor %}"
        "{% if add_generation_prompt %}assistant {% endif %}"
    )
    return tok


def model_dir(path: Path) -> Path:
    """A checkpoint directory frameworks load a tokenizer and config from: :func:`tokenizer` and a one-layer
    Llama config (verl's ``HFModelConfig``, slime's ``--hf-checkpoint``)."""
    tokenizer().save_pretrained(path)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": len(WORDS),
        "hidden_size": 8,
        "intermediate_size": 8,
        "num_hidden_layers": 1,
        "num_attention_heads": 1,
        "num_key_value_heads": 1,
        "max_position_embeddings": 4096,
    }
    (path / "config.json").write_text(json.dumps(config))
    return path
