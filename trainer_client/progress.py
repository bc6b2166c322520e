"""Progress and summary of a batch of rollouts (public: the ``rollouts`` commands and the local demo use them).

:class:`BatchSummary` counts finished rollouts (by status, rewards, latencies) and renders the summary lines;
:class:`RolloutProgress` shows it while the batch runs: a tqdm bar on a terminal, a plain line every
``line_interval_s`` otherwise (a CI log gets lines, not one endless line of carriage returns), or nothing.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TextIO

from tqdm import tqdm

from rollout_contract import Status
from trainer_client._batch import BatchItem
from trainer_client._exceptions import RolloutCancelledError
from trainer_client._words import plural

__all__ = ["BatchSummary", "ProgressMode", "RolloutProgress", "failure_reason", "percentiles", "plural"]

#: ``bar`` (tqdm), ``lines`` (a plain line now and then), ``off``, or ``auto`` (bar on a terminal, else lines).
ProgressMode = Literal["auto", "bar", "lines", "off"]
#: Status name counted for items that ended without a result (a refused submit, a local deadline).
NO_RESULT = "no result"
#: Failed rollouts a summary keeps, to name their reasons.
FAILURES_KEPT = 5


@dataclass
class BatchSummary:
    """What a batch's finished rollouts add up to; :meth:`lines` renders it, :meth:`as_dict` for ``--json``.

    ``run_s`` runs from the summary's creation to the last rollout counted, so a client closing after the
    batch is not part of it.
    """

    total: int
    by_status: Counter[str] = field(default_factory=Counter)
    rewards: list[float] = field(default_factory=list)
    end_to_end_s: list[float] = field(default_factory=list)
    agent_s: list[float] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    last_at: float | None = None
    #: The first :data:`FAILURES_KEPT` rollouts that did not succeed.
    failures: list[BatchItem] = field(default_factory=list)

    @property
    def done(self) -> int:
        """Rollouts counted so far."""
        return sum(self.by_status.values())

    @property
    def failed(self) -> int:
        """Rollouts that did not succeed."""
        return self.done - self.by_status.get("succeeded", 0)

    @property
    def run_s(self) -> float:
        """Seconds from the start to the last rollout counted (or until now, if none was)."""
        return (self.last_at or time.monotonic()) - self.started

    def add(self, item: BatchItem) -> None:
        """Count one finished rollout."""
        self.last_at = time.monotonic()
        self.end_to_end_s.append(item.elapsed)
        if not item.success and len(self.failures) < FAILURES_KEPT:
            self.failures.append(item)
        result = item.result
        if result is None:
            cancelled = isinstance(item.exception, RolloutCancelledError)
            self.by_status[Status.CANCELLED.value if cancelled else NO_RESULT] += 1
            return
        self.by_status[result.status.value] += 1
        if result.ok and result.reward is not None:
            self.rewards.append(result.reward)
        if result.timings.duration_s is not None:
            self.agent_s.append(result.timings.duration_s)

    def lines(self, *, with_time: bool = True) -> list[str]:
        """The summary, one aligned line per figure (``with_time``: the batch's time and rate last)."""
        statuses = ", ".join(f"{name} {count}" for name, count in sorted(self.by_status.items()))
        reward = f"{statistics.fmean(self.rewards):.3f}" if self.rewards else "-"
        lines = [
            f"rollouts        {self.done} ({statuses or 'none'})",
            f"reward mean     {reward} over {plural(len(self.rewards), 'succeeded rollout')}",
            f"end to end      {percentiles(self.end_to_end_s)}  (submit -> result in hand)",
            f"agent run       {percentiles(self.agent_s)}  (handler start -> result written)",
        ]
        if with_time:
            lines.append(f"time            {self.run_s:.1f} s, {self.done / max(self.run_s, 1e-9):.2f} rollouts/s")
        return lines

    def failure_lines(self, where: Callable[[BatchItem], str]) -> list[str]:
        """``N of M rollouts failed`` and one line per kept failure (``where(item): reason``), saying how many
        are shown when not all are (``the first 5:``)."""
        if not self.failed:
            return []
        shown = len(self.failures)
        which = ":" if shown == self.failed else f"; the first {shown}:" if shown > 1 else "; the first:"
        return [
            f"{self.failed} of {plural(self.done, 'rollout')} failed{which}",
            *(f"  {where(item)}: {failure_reason(item)}" for item in self.failures),
        ]

    def as_dict(self) -> dict[str, Any]:
        """The same figures as JSON-ready values."""
        return {
            "rollouts": self.done,
            "by_status": dict(self.by_status),
            "reward_mean": statistics.fmean(self.rewards) if self.rewards else None,
            "end_to_end_s": _quantiles(self.end_to_end_s),
            "agent_s": _quantiles(self.agent_s),
            "run_s": round(self.run_s, 3),
        }


class RolloutProgress:
    """Show a batch's progress on ``out`` (stderr) while :meth:`update` counts into :attr:`summary`.

    Args:
        total: rollouts in the batch.
        mode: see :data:`ProgressMode`.
        out: where to write (default ``sys.stderr``).
        line_interval_s: seconds between plain lines (the last rollout always gets one).
    """

    def __init__(
        self, total: int, *, mode: ProgressMode = "auto", out: TextIO | None = None, line_interval_s: float = 10.0
    ) -> None:
        self.summary = BatchSummary(total)
        self._out = out or sys.stderr
        if mode == "auto":
            mode = "bar" if self._out.isatty() else "lines"
        self._mode = mode
        self._interval = line_interval_s
        self._next_line = time.monotonic() + line_interval_s
        self._bar = (
            tqdm(total=total, unit="rollout", file=self._out, dynamic_ncols=True, mininterval=0.5)
            if mode == "bar"
            else None
        )

    @property
    def failed(self) -> int:
        """Rollouts counted so far that did not succeed."""
        return self.summary.failed

    def update(self, item: BatchItem) -> None:
        """Count one finished rollout and show it."""
        summary = self.summary
        summary.add(item)
        rate = summary.done / max(summary.run_s, 1e-9)
        reward = f"{statistics.fmean(summary.rewards):.3f}" if summary.rewards else "-"
        if self._bar is not None:
            self._bar.set_postfix(failed=summary.failed, per_s=f"{rate:.1f}", reward=reward, refresh=False)
            self._bar.update(1)
        elif self._mode == "lines" and (summary.done in (1, summary.total) or time.monotonic() >= self._next_line):
            self._next_line = time.monotonic() + self._interval
            print(
                f"{summary.done}/{plural(summary.total, 'rollout')} done, {summary.failed} failed, {rate:.2f}/s, "
                f"reward mean {reward}, {summary.run_s:.0f} s",
                file=self._out,
                flush=True,
            )

    def close(self) -> None:
        """Finish the bar (its time stays the batch's: the bar stops counting at the last rollout)."""
        if self._bar is not None:
            self._bar.close()


def failure_reason(item: BatchItem) -> str:
    """Why a rollout did not succeed, in one line: its status and the stored error (or the local one)."""
    result = item.result
    if result is None:
        return item.error or "no reason given"
    error = result.error
    detail = f"{error.type}: {error.message}" if error is not None else result.stop_reason or "no reason given"
    return f"{result.status.value}: {detail}"[:300]


def percentiles(values: list[float]) -> str:
    """``p50 X s, p90 Y s, p99 Z s`` of ``values`` (nearest rank), or ``-`` when there are none."""
    q = _quantiles(values)
    if q is None:
        return "-"
    return f"p50 {q['p50']:.2f} s, p90 {q['p90']:.2f} s, p99 {q['p99']:.2f} s"


def _quantiles(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)
    return {
        name: round(ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))], 3)
        for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
    }
