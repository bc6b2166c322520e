"""The network's modules (imports PyTorch: reach it through :func:`local_stack.tiny_policy.model.build_model`)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional

from local_stack.tiny_policy.model import PolicyConfig

__all__ = ["TinyCausalLM"]


class Block(nn.Module):
    """Pre-norm causal self-attention and an MLP, each with a residual."""

    def __init__(self, config: PolicyConfig) -> None:
        super().__init__()
        self.n_heads = config.n_heads
        self.ln_attn = nn.LayerNorm(config.d_model)
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.proj = nn.Linear(config.d_model, config.d_model)
        self.ln_mlp = nn.LayerNorm(config.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(config.d_model, config.d_ff), nn.GELU(), nn.Linear(config.d_ff, config.d_model)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.ln_attn(x)).split(width, dim=2)
        heads = [t.view(batch, length, self.n_heads, -1).transpose(1, 2) for t in (q, k, v)]
        attended = functional.scaled_dot_product_attention(*heads, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, length, width))
        return x + self.mlp(self.ln_mlp(x))


class TinyCausalLM(nn.Module):
    """Token and learned position embeddings, ``n_layers`` blocks, an output head tied to the embedding."""

    def __init__(self, config: PolicyConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.position = nn.Embedding(config.max_seq_len, config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.ln_out = nn.LayerNorm(config.d_model)
        self.head = nn.Linear(config.d_model, config.vocab_size)
        self.head.weight = self.embed.weight  # tied: attending to a token raises its own logit (copying)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits ``[batch, length, vocab]`` for ids ``[batch, length]``."""
        if ids.shape[1] > self.config.max_seq_len:
            raise ValueError(f"sequence of {ids.shape[1]} tokens is longer than max_seq_len {self.config.max_seq_len}")
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.embed(ids) + self.position(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_out(x))
