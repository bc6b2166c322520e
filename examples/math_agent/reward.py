"""The GSM8K reward: 1.0 when the final ``#### N`` answer equals the ground truth, else 0.0."""

from __future__ import annotations

import math
import re
from typing import Any

from agent_app import RewardFunction

__all__ = ["GSM8KReward", "extract_final_answer"]

# "#### 1,234", "#### $5.50", "####-3.": sign, digits with optional thousands commas, optional decimals.
_FINAL_ANSWER = re.compile(r"####\s*\$?\s*(-?\d[\d,]*(?:\.\d+)?)")


def extract_final_answer(text: str) -> float | None:
    """Return the number after the last ``####`` in ``text`` (commas, ``$`` and a final period tolerated)."""
    matches = _FINAL_ANSWER.findall(text or "")
    if not matches:
        return None
    try:
        return float(matches[-1].replace(",", ""))
    except ValueError:
        return None


class GSM8KReward(RewardFunction):
    """Exact-answer reward for GSM8K-style problems."""

    def __call__(self, *, response: str, ground_truth: str | float, **kwargs: Any) -> float:
        """Return 1.0 if ``response``'s final ``#### N`` equals ``ground_truth`` numerically, else 0.0.

        ``ground_truth`` may be a number, a number string, or a full GSM8K answer ending in ``#### N``.
        """
        answer = extract_final_answer(response)
        if isinstance(ground_truth, str):
            expected = extract_final_answer(ground_truth) if "####" in ground_truth else _to_float(ground_truth)
        else:
            expected = float(ground_truth)
        if answer is None or expected is None:
            return 0.0
        return 1.0 if math.isclose(answer, expected, rel_tol=1e-9, abs_tol=1e-6) else 0.0


def _to_float(text: str) -> float | None:
    try:
        return float(text.replace(",", "").replace("$", "").strip().rstrip("."))
    except ValueError:
        return None
