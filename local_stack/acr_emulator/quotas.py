"""Rate limiting for the emulator: a token bucket per runtime."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["TokenBucket"]


class TokenBucket:
    """``rate`` tokens per second, holding at most ``burst`` (one second's worth by default).

    Args:
        rate: tokens added per second.
        burst: bucket size; defaults to ``max(1, rate)``.
        clock: monotonic clock in seconds (a seam for tests).
    """

    def __init__(self, rate: float, burst: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be positive, got {rate}")
        self.rate = rate
        self.burst = max(1.0, rate) if burst is None else burst
        self._clock = clock
        self._tokens = self.burst
        self._updated = clock()

    def try_take(self) -> bool:
        """Take one token if there is one; return whether it was taken."""
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._updated) * self.rate)
        self._updated = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False
