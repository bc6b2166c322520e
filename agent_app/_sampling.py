"""``_rollout.sampling_params`` as the keyword arguments of an OpenAI-compatible client."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["OPENAI_SAMPLING_NAMES", "openai_sampling_kwargs"]

#: The sampling parameters the OpenAI SDK's ``chat.completions.create`` takes as keywords.
OPENAI_SAMPLING_NAMES = frozenset(
    {
        "temperature",
        "top_p",
        "max_tokens",
        "max_completion_tokens",
        "n",
        "stop",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
    }
)


def openai_sampling_kwargs(sampling_params: Mapping[str, Any] | None) -> dict[str, Any]:
    """The trainer's sampling parameters as keywords for an OpenAI-compatible client.

    Training frameworks send what their inference servers take: verl ``top_k: -1`` and
    ``repetition_penalty: 1.0``, slime ``top_k: -1``, others ``min_p`` or ``stop_token_ids``. The OpenAI
    SDK refuses those as keywords (``create() got an unexpected keyword argument 'top_k'``), while vLLM's
    and SGLang's OpenAI-compatible servers read them from the request body. So the OpenAI parameters
    (:data:`OPENAI_SAMPLING_NAMES`) come back as keywords and every other one under ``extra_body``,
    which the SDK merges into the request body (an ``extra_body`` already in ``sampling_params`` is merged
    into it); ``None`` values are left out::

        params = openai_sampling_kwargs(payload["_rollout"].get("sampling_params"))
        await client.chat.completions.create(model=model_id, messages=messages, **params)

    Strands' ``OpenAIModel(params=...)`` and LiteLLM pass the same dict through.

    Args:
        sampling_params: ``payload["_rollout"]["sampling_params"]`` (may be ``None``).

    Returns:
        A new dict; ``extra_body`` only when a server-specific parameter is present.
    """
    kwargs: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for name, value in (sampling_params or {}).items():
        if name == "extra_body" and isinstance(value, Mapping):
            extra.update(value)
        elif value is not None:
            (kwargs if name in OPENAI_SAMPLING_NAMES else extra)[name] = value
    if extra:
        kwargs["extra_body"] = extra
    return kwargs
