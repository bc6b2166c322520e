"""The local model endpoint: an offline, seeded stand-in for vLLM or SGLang.

- ``app``: :func:`create_app` and :class:`EndpointSettings`: OpenAI-compatible ``/v1/chat/completions``
  (tool calls, SSE streaming), ``/v1/models``, ``/health``, with vLLM's ``prompt_token_ids``,
  ``token_ids`` and ``logprobs``.
- ``policy``: :class:`StandInPolicy`: calls ``calculator`` on a word problem of :mod:`local_stack.problems`,
  then answers ``#### N``, wrong with a temperature-controlled probability (:func:`mistake_probability`).
- ``tokenizer``: :class:`Tokenizer`: deterministic pieces and ids, a ChatML-style prompt rendering.

Run it with ``python -m local_stack.model_endpoint --port 0 --port-file FILE [--latency S] [--seed N]``.
"""

from local_stack.model_endpoint.app import DEFAULT_MODEL_NAME, EndpointSettings, InvalidRequestError, create_app
from local_stack.model_endpoint.policy import StandInPolicy, mistake_probability
from local_stack.model_endpoint.tokenizer import Tokenizer

__all__ = [
    "DEFAULT_MODEL_NAME",
    "EndpointSettings",
    "InvalidRequestError",
    "StandInPolicy",
    "Tokenizer",
    "create_app",
    "mistake_probability",
]
