"""The tiny policy network: a small causal transformer in PyTorch, and the two computations on it.

- :func:`sample_batch`: what the policy server runs: one token at a time from the temperature-scaled,
  top-p-filtered distribution, stopping at a stop id or ``max_tokens``, for all requests that arrived
  together, one forward pass per position. Each sampled token's reported logprob is
  ``log_softmax(logits / T)`` at that token (temperature-scaled, before top-p filtering: the quantity a
  trainer recomputes; at ``top_p = 1`` it is exactly the sampling distribution; ``T = 0`` is greedy and
  reports ``log_softmax(logits)``).
- :func:`sequence_logprobs`: what a trainer runs: the same quantity for every token of whole sequences in
  one forward pass, with gradients.

PyTorch is only in the ML environment (``make ml-env``): :func:`require_torch` says so when it is missing,
and nothing here imports it at module import time except through that function.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import Field, model_validator

from local_stack.tiny_policy.chat_template import VOCAB_SIZE
from rollout_contract.settings import Settings

if TYPE_CHECKING:
    import torch

__all__ = [
    "PolicyConfig",
    "SampledTokens",
    "SamplingRequest",
    "build_model",
    "require_torch",
    "sample_batch",
    "sequence_logprobs",
]


def require_torch() -> Any:
    """Return the ``torch`` module, or raise a RuntimeError that says how to get it."""
    try:
        import torch
    except ImportError as exc:
        raise RuntimeError(
            "the transformer policy needs PyTorch, which lives in the ML environment: run `make ml-env`, "
            "then use .venv-ml/bin/python (or .venv-ml/bin/rollouts)"
        ) from exc
    return torch


class PolicyConfig(Settings):
    """The network's shape and its initialization seed (the server and the trainer build the same one)."""

    vocab_size: int = Field(default=VOCAB_SIZE, ge=1)
    d_model: int = Field(default=64, ge=1)
    n_layers: int = Field(default=2, ge=1)
    n_heads: int = Field(default=4, ge=1)
    d_ff: int = Field(default=128, ge=1)
    max_seq_len: int = Field(default=192, ge=1)
    seed: int = 0

    @model_validator(mode="after")
    def _heads(self) -> PolicyConfig:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be a multiple of n_heads ({self.n_heads})")
        return self

    def to_dict(self) -> dict[str, int]:
        """The config as JSON-ready fields (``PolicyConfig(**d)`` reads them back)."""
        return self.model_dump()


def build_model(config: PolicyConfig) -> torch.nn.Module:
    """Build the network with weights drawn from ``torch.manual_seed(config.seed)``, in fp32 on the CPU."""
    torch = require_torch()
    from local_stack.tiny_policy._network import TinyCausalLM

    torch.manual_seed(config.seed)
    model = TinyCausalLM(config)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.dim() > 1:
                torch.nn.init.normal_(parameter, std=0.02)
            elif name.endswith("bias"):
                torch.nn.init.zeros_(parameter)
    return model.float().eval()


def sequence_logprobs(model: torch.nn.Module, ids: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Return ``[batch, length - 1]``: the logprob of each token ``ids[:, t + 1]`` given ``ids[:, : t + 1]``.

    ``log_softmax(logits / temperature)``; ``temperature <= 0`` means 1 (greedy decoding reports raw
    logprobs). Padding at the end of a row does not change the values before it (causal attention).
    """
    torch = require_torch()
    scale = temperature if temperature > 0 else 1.0
    logits = model(ids[:, :-1]).float() / scale
    return torch.log_softmax(logits, dim=-1).gather(2, ids[:, 1:].unsqueeze(2)).squeeze(2)


@dataclass(frozen=True)
class SamplingRequest:
    """One completion to sample: the prompt, when to stop, and how to draw."""

    prompt_ids: list[int]
    max_tokens: int
    stop_ids: frozenset[int]
    temperature: float
    top_p: float
    generator: torch.Generator


@dataclass
class SampledTokens:
    """A sampled completion: token ids, their logprobs (as :func:`sequence_logprobs` computes them), and
    whether a stop id ended it.
    """

    token_ids: list[int]
    logprobs: list[float]
    stopped: bool = False


def sample_batch(model: torch.nn.Module, requests: Sequence[SamplingRequest]) -> list[SampledTokens]:
    """Sample every request together: one forward pass per token position for all unfinished rows.

    Rows are right-padded, so padding never changes a row's logits (causal attention, absolute positions
    unshifted); each row draws from its own generator, so a seeded request gives the same tokens alone or
    in a batch.

    Raises:
        ValueError: a prompt leaves no room in ``max_seq_len`` (nothing is sampled then).
    """
    torch = require_torch()
    limit = model.config.max_seq_len
    for request in requests:
        if len(request.prompt_ids) >= limit:
            raise ValueError(f"the prompt has {len(request.prompt_ids)} tokens; this model reads at most {limit - 1}")
    rows = [list(request.prompt_ids) for request in requests]
    results = [SampledTokens([], []) for _ in requests]
    budgets = [min(request.max_tokens, limit - len(row)) for request, row in zip(requests, rows, strict=True)]
    active = [index for index, budget in enumerate(budgets) if budget > 0]
    with torch.no_grad():
        while active:
            ids = torch.zeros((len(active), max(len(rows[index]) for index in active)), dtype=torch.long)
            for position, index in enumerate(active):
                ids[position, : len(rows[index])] = torch.tensor(rows[index])
            logits = model(ids).float()
            still = []
            for position, index in enumerate(active):
                request, result = requests[index], results[index]
                scale = request.temperature if request.temperature > 0 else 1.0
                log_probs = torch.log_softmax(logits[position, len(rows[index]) - 1] / scale, dim=-1)
                if request.temperature <= 0:
                    token = int(torch.argmax(log_probs))
                else:
                    token = _draw(log_probs, request.top_p, request.generator)
                result.token_ids.append(token)
                result.logprobs.append(float(log_probs[token]))
                rows[index].append(token)
                result.stopped = token in request.stop_ids
                if not result.stopped and len(result.token_ids) < budgets[index]:
                    still.append(index)
            active = still
    return results


def _draw(log_probs: torch.Tensor, top_p: float, generator: torch.Generator) -> int:
    """One draw from ``exp(log_probs)`` restricted to the smallest set of top tokens with mass >= ``top_p``."""
    torch = require_torch()
    probs = log_probs.exp()
    if top_p < 1.0:
        ordered, order = torch.sort(probs, descending=True)
        keep = torch.cumsum(ordered, 0) - ordered < top_p
        probs = torch.zeros_like(probs).scatter(0, order[keep], ordered[keep])
    return int(torch.multinomial(probs, 1, generator=generator))
