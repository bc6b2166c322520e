"""The local model endpoint: an offline, seeded stand-in for vLLM or SGLang.

- ``app``: :func:`create_app` and :class:`EndpointSettings`: OpenAI-compatible ``/v1/chat/completions``
  (tool calls, SSE streaming), ``/v1/models``, ``/health``, with vLLM's ``prompt_token_ids``,
  ``token_ids`` and ``logprobs``.
- ``chat``: the request, answer and policy interface the app and the policies behind it share.
- ``policy``: :class:`StandInPolicy`: calls ``calculator`` on a word problem of :mod:`local_stack.problems`,
  then answers ``#### N``, wrong with a temperature-controlled probability (:func:`mistake_probability`).
- ``tokenizer``: :class:`Tokenizer`: deterministic pieces and ids, a ChatML-style prompt rendering.

Run it with ``python -m local_stack.model_endpoint --port 0 --port-file FILE [--latency S] [--seed N]``.
"""

from typing import TYPE_CHECKING, Any

from local_stack.hosting import DEFAULT_MODEL_NAME
from local_stack.model_endpoint.chat import InvalidRequestError
from local_stack.model_endpoint.policy import StandInPolicy, mistake_probability
from local_stack.model_endpoint.tokenizer import Tokenizer

if TYPE_CHECKING:
    from local_stack.model_endpoint.app import EndpointSettings, create_app

__all__ = [
    "DEFAULT_MODEL_NAME",
    "EndpointSettings",
    "InvalidRequestError",
    "StandInPolicy",
    "Tokenizer",
    "create_app",
    "mistake_probability",
]


def __getattr__(name: str) -> Any:
    """``EndpointSettings`` and ``create_app`` load the app on first use, so a policy module that imports a
    submodule of this package (``chat``, ``policy``, ``tokenizer``) does not import the app (no import cycle)."""
    if name in ("EndpointSettings", "create_app"):
        from local_stack.model_endpoint import app

        return getattr(app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
