"""The math agent's payload ``{"prompt", "answer"}`` from each training framework's dataset rows.

The backends' YAML files in ``backends/`` name these as their ``payload_fn``. rLLM and ART forward a
row's own fields (rLLM's task dict, ART's ``payload`` column): write those rows as ``{"prompt", "answer"}``
(``dataset.write_jsonl`` does).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["from_slime_sample", "from_verl_row"]


def from_verl_row(row: Mapping[str, Any]) -> dict[str, str]:
    """verl's GSM8K row: the question is the last user message of ``raw_prompt``, the answer
    ``reward_model["ground_truth"]``.

    Raises:
        ValueError: the row has no user message or no ground truth.
    """
    users = [message["content"] for message in row["raw_prompt"] if message.get("role") == "user"]
    truth = (row.get("reward_model") or {}).get("ground_truth")
    if not users or truth is None:
        raise ValueError(
            "a verl row for the math agent needs a user message in raw_prompt and reward_model.ground_truth "
            "(verl's GSM8K preprocessing writes both)"
        )
    return {"prompt": str(users[-1]), "answer": str(truth)}


def from_slime_sample(sample: Any) -> dict[str, str]:
    """slime's prompt sample: ``prompt`` (text, or chat messages whose last user turn is the question) and
    ``label`` (the answer, from ``--label-key``).

    Raises:
        ValueError: the sample has no label.
    """
    prompt = sample.prompt
    if isinstance(prompt, list):
        prompt = [message["content"] for message in prompt if message.get("role") == "user"][-1]
    if sample.label is None:
        raise ValueError("a slime sample for the math agent needs a label: pass --label-key with the answer's column")
    return {"prompt": str(prompt), "answer": str(sample.label)}
