"""A real policy for the local stack: a tiny causal transformer in PyTorch behind the model endpoint.

- ``chat_template``: :class:`ChatTokenizer`: one id per character plus four special tokens, exact and
  reversible; the ChatML-style template and how a tool call is emitted (one ``<tool_call>`` token).
- ``model``: :class:`PolicyConfig`, :func:`build_model` (seeded initialization), :func:`sample_batch`
  (the server's sampling) and :func:`sequence_logprobs` (a trainer's recomputation).
- ``server``: ``TransformerPolicy``, the :class:`~local_stack.model_endpoint.chat.ChatPolicy` that serves it,
  with ``weight_version`` in every response and ``POST /v1/weights`` to load new weights.

Run it with ``python -m local_stack.model_endpoint --policy transformer`` or ``rollouts local up --policy
transformer``. PyTorch is imported only when a network is built: ``make ml-env`` provides it.
"""

from local_stack.tiny_policy.chat_template import ChatTokenizer, VocabularyError
from local_stack.tiny_policy.model import (
    PolicyConfig,
    SamplingRequest,
    build_model,
    require_torch,
    sample_batch,
    sequence_logprobs,
)

__all__ = [
    "ChatTokenizer",
    "PolicyConfig",
    "VocabularyError",
    "build_model",
    "require_torch",
    "SamplingRequest",
    "sample_batch",
    "sequence_logprobs",
]
