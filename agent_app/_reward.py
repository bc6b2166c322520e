"""The reward interface, as ART defines it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

__all__ = ["RewardFunction"]


class RewardFunction(ABC):
    """Scores one rollout.

    Subclasses implement ``__call__`` with the keyword arguments their agent passes (the model's answer,
    the ground truth, ...). The handler puts the score under ``"rewards"`` in the dict it returns.
    """

    @abstractmethod
    def __call__(self, **kwargs: Any) -> float | list[float]:
        """Return the reward: a float, or a list of floats (per turn; the last one is the rollout's)."""
