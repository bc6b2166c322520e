"""The reward interface, as ART defines it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

__all__ = ["RewardFunction"]


class RewardFunction(ABC):
    """Scores one rollout.

    Subclasses implement ``__call__`` with the keyword arguments their agent passes (the model's answer,
    the ground truth, ...). The handler puts the score under ``"rewards"`` in the dict it returns. The
    base signature takes ``*args`` too (ART's takes ``**kwargs``) so that type checkers accept any subclass
    signature, such as ``__call__(self, *, response: str, ground_truth: str)``.
    """

    @abstractmethod
    def __call__(self, *args: Any, **kwargs: Any) -> float | list[float]:
        """Return the reward: a float, or a list of floats (per turn; the last one is the rollout's)."""
