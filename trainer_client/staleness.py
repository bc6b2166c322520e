"""Staleness: how many weight versions behind the trainer's current one the trained tokens were sampled.

Every trace records the weight version that served its call (:class:`trainer_client.TokenTrace.weight_version`), so
the lag of each token is measured: the trainer's current version minus the version that sampled it. A step's
staleness is that lag over its tokens, each token counted once: ``p50`` (the median token) and ``max``.
``rollouts top`` shows it for the tokens the gateway served in the last minutes, slime's step metrics for the
tokens each step trains (``agentcore/staleness_p50`` / ``agentcore/staleness_max``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from trainer_client.backends.assembly import TokenCall, TokenRow

__all__ = ["Staleness", "VersionedCall", "trained_tokens_by_version"]


class VersionedCall(TokenCall, Protocol):
    """A model call that records the weight version that served it (``TokenTrace`` is one)."""

    @property
    def weight_version(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class Staleness:
    """The lag of a set of tokens behind the trainer's ``current`` weight version.

    Attributes:
        current: the trainer's weight version the lag is taken against.
        p50: the median token's lag (the mean of the two middle ones for an even count).
        max: the largest lag of any token.
        tokens: how many tokens with a known version were counted.
    """

    current: int
    p50: float
    max: int
    tokens: int

    @classmethod
    def of(cls, current: int, tokens_by_version: Mapping[int, int]) -> Staleness | None:
        """The staleness of ``tokens_by_version`` (token counts by the version that sampled them); ``None`` when no
        token is counted."""
        lags = sorted((current - version, count) for version, count in tokens_by_version.items() if count > 0)
        total = sum(count for _, count in lags)
        if not total:
            return None
        middle = [_lag_of_token(lags, (total - 1) // 2), _lag_of_token(lags, total // 2)]
        return cls(current=current, p50=sum(middle) / 2, max=lags[-1][0], tokens=total)


def _lag_of_token(lags: Sequence[tuple[int, int]], index: int) -> int:
    """The lag of the ``index``-th token of ``lags`` (``(lag, count)`` sorted by lag)."""
    for lag, count in lags:
        if index < count:
            return lag
        index -= count
    raise IndexError(index)


def trained_tokens_by_version(rows: Iterable[TokenRow], calls: Sequence[VersionedCall]) -> Counter[int]:
    """How many sampled tokens each weight version contributed to ``rows`` (mask-1 tokens, after truncation).

    ``rows`` are :func:`~trainer_client.backends.assembly.assemble_rows` of ``calls``, in order; a row's trained
    tokens are its calls' completions in call order up to its ``num_sampled`` (a cut response keeps its first
    tokens). Calls with no recorded version are not counted.
    """
    counts: Counter[int] = Counter()
    position = 0
    for row in rows:
        left = row.num_sampled
        for call in calls[position : position + row.num_calls]:
            taken = min(len(call.completion_token_ids), left)
            left -= taken
            if call.weight_version is not None and taken:
                counts[call.weight_version] += taken
        position += row.num_calls
    return counts
