"""A progress bar for a batch of rollouts (public: the ``rollouts`` commands and the local demo use it)."""

from __future__ import annotations

import statistics
import sys
import time

from tqdm import tqdm

from trainer_client._batch import BatchItem

__all__ = ["RolloutProgress"]


class RolloutProgress:
    """A progress bar (tqdm, on stderr) showing done, failed, throughput and mean reward of rollouts."""

    def __init__(self, total: int) -> None:
        self.failed = 0
        self._rewards: list[float] = []
        self._start = time.monotonic()
        self._bar = tqdm(total=total, unit="rollout", file=sys.stderr, dynamic_ncols=True)

    def update(self, item: BatchItem) -> None:
        """Count one finished rollout."""
        self.failed += not item.success
        if item.success and item.result is not None and item.result.reward is not None:
            self._rewards.append(item.result.reward)
        rate = (self._bar.n + 1) / max(time.monotonic() - self._start, 1e-9)
        reward = f"{statistics.fmean(self._rewards):.3f}" if self._rewards else "-"
        self._bar.set_postfix(failed=self.failed, per_s=f"{rate:.1f}", reward=reward, refresh=False)
        self._bar.update(1)

    def close(self) -> None:
        """Finish the bar."""
        self._bar.close()
