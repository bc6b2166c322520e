"""The CLI's one way to say a count: ``1 rollout``, ``2 rollouts``, ``0 rollouts`` (never ``1 rollouts``)."""

from __future__ import annotations

__all__ = ["plural"]


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``count`` and ``noun`` in the form it takes: ``plural(1, "rollout")`` -> ``1 rollout``.

    ``nouns`` is the plural when it is not ``noun + "s"`` (``plural(2, "sandbox", "sandboxes")``).
    """
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"
