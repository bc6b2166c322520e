"""Stand-in for ``slime/utils/data.py``: the prompt ``Dataset`` slime's data source builds, and ``get_source``.

JSONL only (slime also reads parquet); text prompts and chat messages, no multimodal inputs.
"""

import json
import random
from pathlib import Path

from slime.utils.types import Sample


def read_file(path):
    if not Path(path).exists():
        raise FileNotFoundError(f"Prompt dataset path '{path}' does not exist.")
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                yield json.loads(line)


class Dataset:
    """One ``Sample(prompt, label, metadata)`` per row: ``prompt_key``'s text (as a user message when a chat
    template applies, then rendered by it), ``label_key``'s value, ``metadata_key``'s dict (plus ``tools``)."""

    def __init__(
        self,
        path,
        tokenizer,
        processor,
        max_length,
        *,
        prompt_key="text",
        multimodal_keys=None,
        label_key=None,
        tool_key=None,
        metadata_key="metadata",
        seed=42,
        apply_chat_template=False,
        apply_chat_template_kwargs=None,
    ):
        samples = []
        for data in read_file(path):
            prompt = data.get(prompt_key)
            if isinstance(prompt, str) and apply_chat_template:
                prompt = [{"role": "user", "content": prompt}]
            metadata = data.get(metadata_key) or {}
            tools = data.get(tool_key) if tool_key is not None else None
            if tools is not None:
                metadata["tools"] = tools
            if apply_chat_template:
                prompt = tokenizer.apply_chat_template(
                    prompt,
                    tools=tools,
                    tokenize=False,
                    add_generation_prompt=True,
                    **(apply_chat_template_kwargs or {}),
                )
            label = data[label_key] if label_key is not None else None
            samples.append(Sample(prompt=prompt, label=label, metadata=metadata))
        if max_length is not None and samples and isinstance(samples[0].prompt, str):
            ids = tokenizer([s.prompt for s in samples], add_special_tokens=False)["input_ids"]
            samples = [sample for sample, prompt_ids in zip(samples, ids, strict=True) if len(prompt_ids) <= max_length]
        self.origin_samples = samples
        self.epoch_id = -1
        self.seed = seed
        self.samples = self.origin_samples

    def shuffle(self, new_epoch_id):
        if self.epoch_id == new_epoch_id:
            return
        random.seed(self.seed + new_epoch_id)
        permutation = list(range(len(self.samples)))
        random.shuffle(permutation)
        self.samples = [self.origin_samples[i] for i in permutation]
        self.epoch_id = new_epoch_id

    def __len__(self):
        return len(self.samples)


def get_source(sample: Sample) -> str:
    metadata = getattr(sample, "metadata", None) or {}
    if getattr(sample, "source", None):
        return sample.source
    return metadata.get("source_name") or "unknown"
