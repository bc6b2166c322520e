"""A tiny mixture-of-experts router for the stand-in model: the per-token routing a MoE server returns.

vLLM started with ``--enable-return-routed-experts`` returns, on each choice, ``routed_experts``: for every token it
fed through the model (the prompt's and the completion's, all but the last sampled token), the experts each MoE
layer routed it to, ``[token][layer][k]``. The stand-in has no network, so its "router" is a fixed function of a
token and the one before it (the context a real router sees through the hidden state): the same sequence is routed
the same way whether a token was decoded or prefilled later in a longer prompt, as with a real router at fixed
weights. Sizes: :data:`LAYERS` MoE layers, top-:data:`TOP_K` of :data:`EXPERTS` experts.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["EXPERTS", "LAYERS", "TOP_K", "routed_experts"]

LAYERS = 4
EXPERTS = 8
TOP_K = 2


def _score(previous: int, token: int, layer: int, expert: int) -> int:
    """A fixed pseudo-random gate score (Knuth's multiplicative hash of the four inputs)."""
    mixed = (token * 2654435761 + previous * 40503 + layer * 9973 + expert * 7919) & 0xFFFFFFFF
    return (mixed * 2246822519) & 0xFFFFFFFF


def routed_experts(token_ids: Sequence[int]) -> list[list[list[int]]]:
    """The routing of every token fed through the model: all of ``token_ids`` but the last."""
    rows = []
    for position in range(len(token_ids) - 1):
        previous = token_ids[position - 1] if position else -1
        token = token_ids[position]
        rows.append(
            [
                sorted(range(EXPERTS), key=lambda expert: -_score(previous, token, layer, expert))[:TOP_K]
                for layer in range(LAYERS)
            ]
        )
    return rows
