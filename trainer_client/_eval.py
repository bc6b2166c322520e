"""``rollouts eval``: run every dataset row as rollouts, write the results, resume from a journal.

Each row's input id is its ``--input-id-field`` or ``row-<n>-<digest of the row>``, so a journal says which
rows it already holds: ``--resume JOURNAL`` collects the journal's rollouts (stored results are read, requests
it cannot prove were sent are sent again) and submits only the samples the journal lacks. Ctrl-C cancels the
rollouts still running (``--keep-running`` leaves them; ``--resume`` collects them later), writes a row for
every rollout started (the cancelled ones too) and marks the cancelled ones in the journal, so that a resume
runs those samples again.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import as_completed
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO, cast

from rollout_contract import ResultKey, Status
from trainer_client._batch import BatchItem
from trainer_client._client import RolloutClient
from trainer_client._future import RolloutFuture
from trainer_client._journal import Journal, read_journal_entries
from trainer_client._words import plural
from trainer_client.progress import ProgressMode, RolloutProgress

__all__ = ["EvalInterrupted", "EvalPlan", "plan_eval", "plan_samples", "row_input_id", "run_eval"]


def row_input_id(number: int, row: dict[str, Any]) -> str:
    """The input id of dataset row ``number`` (1-based) without ``--input-id-field``: position and content."""
    digest = hashlib.sha256(json.dumps(row, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:12]
    return f"row-{number}-{digest}"


@dataclass(frozen=True)
class EvalPlan:
    """What an eval submits: ``(index, payload, input_id)`` per new rollout, and the total it accounts for.

    Attributes:
        todo: rollouts to submit, with their index in the full ``rows x samples`` order.
        total: rows x samples.
        index_of: input id -> index of its row's first sample (attached rollouts are placed with it).
        resumed: rollouts the journal holds for rows of this dataset.
        strangers: rollouts the journal holds for input ids no row of this dataset has.
    """

    todo: list[tuple[int, dict[str, Any], str]]
    total: int
    index_of: dict[str, int]
    resumed: int = 0
    strangers: int = 0


def plan_eval(rows: list[dict[str, Any]], input_ids: list[str], samples: int, journal: Path | None) -> EvalPlan:
    """Plan ``samples`` rollouts per row, less those ``journal`` (an earlier eval's) already holds."""
    entries = read_journal_entries(journal) if journal is not None else []
    return plan_samples(
        rows, input_ids, samples, Counter(entry.key.input_id for entry in entries if not entry.cancelled)
    )


def plan_samples(
    rows: Sequence[Mapping[str, Any]], input_ids: list[str], samples: int, held: Mapping[str, int]
) -> EvalPlan:
    """Plan ``samples`` rollouts per row, less the ``held`` ones (input id -> rollouts an earlier run has: an
    eval's journal, a demo's results file), each row's samples placed after the held ones."""
    index_of = {input_id: number * samples for number, input_id in enumerate(input_ids)}
    todo: list[tuple[int, dict[str, Any], str]] = []
    for number, (row, input_id) in enumerate(zip(rows, input_ids, strict=True)):
        first_new = min(held.get(input_id, 0), samples)
        todo.extend((number * samples + k, dict(row), input_id) for k in range(first_new, samples))
    resumed = sum(min(count, samples) for input_id, count in held.items() if input_id in index_of)
    strangers = sum(count for input_id, count in held.items() if input_id not in index_of)
    return EvalPlan(todo, len(rows) * samples, index_of, resumed, strangers)


def run_eval(
    client: RolloutClient,
    plan: EvalPlan,
    *,
    resume: Path | None,
    journal: Path | None,
    output: Path,
    concurrency: int,
    timeout: float,
    overrides: dict[str, Any],
    progress_mode: ProgressMode,
    keep_running: bool,
    err: TextIO | None = None,
) -> RolloutProgress:
    """Run ``plan`` (after collecting ``resume``'s rollouts), write every result to ``output``; return the tally.

    On Ctrl-C the client's rollouts still running are cancelled (unless ``keep_running``) and marked so in
    ``journal``, a row is written for every rollout started and not written yet, and :class:`EvalInterrupted`
    (a ``KeyboardInterrupt`` holding the tally of every row) is raised.
    """
    err = err or sys.stderr
    progress = RolloutProgress(plan.total, mode=progress_mode, out=err)
    attached = client.attach_journal(resume) if resume is not None else []
    run = _EvalRun(client, plan, attached, concurrency, timeout, journal, overrides)
    with output.open("w", encoding="utf-8") as out:
        try:
            for item in run.items():
                out.write(json.dumps(item.to_record()) + "\n")
                progress.update(item)
        except KeyboardInterrupt as interrupt:
            progress.close()
            cancelled = 0 if keep_running else client.cancel_pending()
            rest = run.unfinished()
            if journal is not None and not keep_running:
                Journal(journal).mark_cancelled(
                    ResultKey(client.exp_id, item.input_id or "", item.session_id)
                    for item in rest
                    if item.result is None or item.result.status is Status.CANCELLED
                )
            for item in rest:
                out.write(json.dumps(item.to_record()) + "\n")
                progress.summary.add(item)
            if keep_running:
                print(f"interrupted; rollouts keep running (collect them with --resume {journal})", file=err)
            else:
                print(f"interrupted; cancelled {plural(cancelled, 'rollout')} still running", file=err)
            raise EvalInterrupted(progress) from interrupt
    progress.close()
    return progress


class EvalInterrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`run_eval`, after every started rollout's row was written: ``progress`` tallies them."""

    def __init__(self, progress: RolloutProgress) -> None:
        super().__init__("interrupted")
        self.progress = progress


class _EvalRun:
    """The attached rollouts already ended, then the new ones as they end, then the attached ones left."""

    def __init__(
        self,
        client: RolloutClient,
        plan: EvalPlan,
        attached: list[RolloutFuture],
        concurrency: int,
        timeout: float,
        journal: Path | None,
        overrides: dict[str, Any],
    ) -> None:
        self._plan = plan
        self._attached = attached
        self._written: set[RolloutFuture] = set()
        self._placed: dict[RolloutFuture, int] = {}
        seen: Counter[str] = Counter()
        for future in attached:
            input_id = future.input_id or ""
            self._placed[future] = plan.index_of.get(input_id, plan.total) + seen[input_id]
            seen[input_id] += 1
        self._batch = None
        if plan.todo:
            self._batch = client.run_batch(
                [payload for _, payload, _ in plan.todo],
                concurrency,
                timeout,
                input_ids=[input_id for _, _, input_id in plan.todo],
                journal=journal,
                **overrides,
            )

    def items(self) -> Iterator[BatchItem]:
        """Every rollout's item, once."""
        ended = [future for future in self._attached if future.done()]
        yield from (self._attached_item(future) for future in ended)
        for item in self._batch or ():
            yield replace(item, index=self._plan.todo[item.index][0])
        for done in as_completed([future for future in self._attached if future not in self._written]):
            yield self._attached_item(cast(RolloutFuture, done))  # as_completed hands back the futures given

    def unfinished(self) -> list[BatchItem]:
        """Items of the rollouts started and not yielded, as they are now (after a Ctrl-C)."""
        started = self._batch.unfinished() if self._batch is not None else []
        rest = [replace(item, index=self._plan.todo[item.index][0]) for item in started]
        for future in self._attached:
            if future in self._written:
                continue
            if future.done():
                rest.append(self._attached_item(future))
            else:
                error = "still running when eval was interrupted (collect it with --resume)"
                index = self._placed[future]
                rest.append(BatchItem(False, None, error, index, future.elapsed(), future.session_id, future.input_id))
        return rest

    def _attached_item(self, future: RolloutFuture) -> BatchItem:
        self._written.add(future)
        return BatchItem.from_future(future, self._placed[future])
