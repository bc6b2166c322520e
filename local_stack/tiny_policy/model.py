"""The tiny policy network: a small causal transformer in PyTorch, and the two computations on it.

- :func:`sample_completion`: what the policy server runs: one token at a time from the temperature-scaled,
  top-p-filtered distribution, stopping at a stop id or ``max_tokens``. Each sampled token's reported
  logprob is ``log_softmax(logits / T)`` at that token (temperature-scaled, before top-p filtering: the
  quantity a trainer recomputes; at ``top_p = 1`` it is exactly the sampling distribution; ``T = 0`` is
  greedy and reports ``log_softmax(logits)``).
- :func:`sequence_logprobs`: what a trainer runs: the same quantity for every token of whole sequences in
  one forward pass, with gradients.

PyTorch is only in the ML environment (``make ml-env``): :func:`require_torch` says so when it is missing,
and nothing here imports it at module import time except through that function.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from local_stack.tiny_policy.chat_template import VOCAB_SIZE

if TYPE_CHECKING:
    import torch

__all__ = ["PolicyConfig", "build_model", "require_torch", "sample_completion", "sequence_logprobs"]


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


@dataclass(frozen=True)
class PolicyConfig:
    """The network's shape and its initialization seed (the server and the trainer build the same one)."""

    vocab_size: int = VOCAB_SIZE
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    d_ff: int = 128
    max_seq_len: int = 192
    seed: int = 0

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be a multiple of n_heads ({self.n_heads})")
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "max_seq_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")

    def to_dict(self) -> dict[str, int]:
        """The config as JSON-ready fields (``PolicyConfig(**d)`` reads them back)."""
        return asdict(self)


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


def sample_completion(
    model: torch.nn.Module,
    prompt_ids: list[int],
    *,
    max_tokens: int,
    stop_ids: frozenset[int],
    temperature: float,
    top_p: float,
    generator: torch.Generator,
) -> tuple[list[int], list[float], bool]:
    """Sample up to ``max_tokens`` tokens after ``prompt_ids``.

    Returns:
        (token ids, their logprobs as :func:`sequence_logprobs` computes them, whether a stop id ended it).
    """
    torch = require_torch()
    scale = temperature if temperature > 0 else 1.0
    ids = list(prompt_ids)
    tokens: list[int] = []
    logprobs: list[float] = []
    room = model.config.max_seq_len - len(ids)
    if room < 1:
        raise ValueError(f"the prompt has {len(ids)} tokens; this model reads at most {model.config.max_seq_len}")
    with torch.no_grad():
        for _ in range(min(max_tokens, room)):
            logits = model(torch.tensor([ids]))[0, -1].float()
            log_probs = torch.log_softmax(logits / scale, dim=-1)
            if temperature <= 0:
                token = int(torch.argmax(log_probs))
            else:
                token = _draw(log_probs, top_p, generator)
            tokens.append(token)
            logprobs.append(float(log_probs[token]))
            ids.append(token)
            if token in stop_ids:
                return tokens, logprobs, True
    return tokens, logprobs, False


def _draw(log_probs: torch.Tensor, top_p: float, generator: torch.Generator) -> int:
    """One draw from ``exp(log_probs)`` restricted to the smallest set of top tokens with mass >= ``top_p``."""
    torch = require_torch()
    probs = log_probs.exp()
    if top_p < 1.0:
        ordered, order = torch.sort(probs, descending=True)
        keep = torch.cumsum(ordered, 0) - ordered < top_p
        probs = torch.zeros_like(probs).scatter(0, order[keep], ordered[keep])
    return int(torch.multinomial(probs, 1, generator=generator))
