"""``rollouts eval``: run every dataset row as rollouts, write the results, resume from a journal.

Each row's input id is its ``--input-id-field`` or ``row-<n>-<digest of the row>``, so a journal says which
rows it already holds: ``--resume JOURNAL`` collects the journal's rollouts (stored results are read, requests
it cannot prove were sent are sent again) and submits only the samples the journal lacks. Ctrl-C cancels the
rollouts still running (``--keep-running`` leaves them; ``--resume`` collects them later).
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import as_completed
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO, cast

from trainer_client._batch import BatchItem
from trainer_client._client import RolloutClient
from trainer_client._future import RolloutFuture
from trainer_client._journal import read_journal_entries
from trainer_client.progress import ProgressMode, RolloutProgress

__all__ = ["EvalPlan", "plan_eval", "row_input_id", "run_eval"]


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
    held = Counter(entry.key.input_id for entry in read_journal_entries(journal)) if journal is not None else Counter()
    index_of = {input_id: number * samples for number, input_id in enumerate(input_ids)}
    todo: list[tuple[int, dict[str, Any], str]] = []
    for number, (row, input_id) in enumerate(zip(rows, input_ids, strict=True)):
        first_new = min(held.get(input_id, 0), samples)
        todo.extend((number * samples + k, row, input_id) for k in range(first_new, samples))
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

    On Ctrl-C the client's rollouts still running are cancelled (unless ``keep_running``) and the
    ``KeyboardInterrupt`` goes on.
    """
    err = err or sys.stderr
    progress = RolloutProgress(plan.total, mode=progress_mode)
    attached = client.attach_journal(resume) if resume is not None else []
    try:
        with output.open("w", encoding="utf-8") as out:
            for item in _items(client, plan, attached, concurrency, timeout, journal, overrides):
                out.write(json.dumps(item.to_record()) + "\n")
                progress.update(item)
    except KeyboardInterrupt:
        progress.close()
        if keep_running:
            print(f"interrupted; rollouts keep running (collect them with --resume {journal})", file=err)
        else:
            print(f"interrupted; cancelled {client.cancel_pending()} rollouts still running", file=err)
        raise
    progress.close()
    return progress


def _items(
    client: RolloutClient,
    plan: EvalPlan,
    attached: list[RolloutFuture],
    concurrency: int,
    timeout: float,
    journal: Path | None,
    overrides: dict[str, Any],
) -> Iterator[BatchItem]:
    """The attached rollouts already ended, then the new ones as they end, then the attached ones left."""
    seen: Counter[str] = Counter()
    placed: dict[RolloutFuture, int] = {}
    for future in attached:
        input_id = future.input_id or ""
        placed[future] = plan.index_of.get(input_id, plan.total) + seen[input_id]
        seen[input_id] += 1
    ended = [future for future in attached if future.done()]
    yield from (BatchItem.from_future(future, placed[future]) for future in ended)
    if plan.todo:
        batch = client.run_batch(
            [payload for _, payload, _ in plan.todo],
            concurrency,
            timeout,
            input_ids=[input_id for _, _, input_id in plan.todo],
            journal=journal,
            **overrides,
        )
        for item in batch:
            yield replace(item, index=plan.todo[item.index][0])
    left = [future for future in attached if future not in ended]
    for done in as_completed(left):
        future = cast(RolloutFuture, done)  # as_completed hands back the futures it was given
        yield BatchItem.from_future(future, placed[future])
