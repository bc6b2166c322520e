"""The sweeper: rollouts past their deadline end as ``timed_out``; the slot count is reconciled.

Runs every minute (EventBridge schedule in AWS, a timer in the local worker); the event is ignored.
For each overdue rollout it writes a ``timed_out`` result the first-writer-wins way (an agent result
already there wins) and finishes the rollout through the same transition as the finisher, so whoever is
first frees the slot. Then it publishes the in-flight gauge and reconciles the slot count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lambdas.exceptions import NoTokenError, RetryableAcrError
from lambdas.finishing import DEADLINE_EXCEEDED, finish_rollout
from lambdas.ledger import Reconciliation, Transition
from lambdas.observability import add_metric, flush_metrics, logger
from lambdas.runtime import current_runtime
from rollout_contract import metrics as names
from rollout_contract.keys import ResultKey
from rollout_contract.results import ErrorInfo, RolloutResult, Status, Timings

if TYPE_CHECKING:
    from lambdas.ledger import SessionRecord
    from lambdas.runtime import Runtime


@dataclass(frozen=True)
class SweepReport:
    """What one sweep did."""

    overdue: int
    finished: int
    retry_later: int
    reconciliation: Reconciliation


def sweep(rt: Runtime) -> SweepReport:
    """End every overdue rollout, publish the in-flight gauge and reconcile the slot count."""
    now = rt.clock()
    overdue = finished = retry_later = 0
    for record in rt.ledger.overdue(now):
        overdue += 1
        try:
            transition = finish_rollout(_timed_out_or_existing(record, now, rt), rt)
        except (NoTokenError, RetryableAcrError) as exc:
            retry_later += 1
            logger.warning(
                "could not end an overdue rollout yet", extra={"session_id": record.session_id, "error": str(exc)}
            )
            continue
        finished += transition is not Transition.ALREADY_FINISHED
    reconciliation = rt.ledger.reconcile(rt.clock())
    add_metric(names.IN_FLIGHT, reconciliation.inflight)
    if reconciliation.applied:
        add_metric(names.SLOT_DRIFT, reconciliation.inflight - reconciliation.held_before)
    return SweepReport(overdue, finished, retry_later, reconciliation)


def _timed_out_or_existing(record: SessionRecord, now: float, rt: Runtime) -> RolloutResult:
    """Write the ``timed_out`` result of an overdue rollout, or return the result that got there first."""
    key = ResultKey(record.exp_id or rt.settings.exp_id, record.input_id or "", record.session_id)
    result = RolloutResult.terminal(
        Status.TIMED_OUT,
        key=key,
        s3_bucket=rt.settings.results_bucket,
        error=ErrorInfo(type=DEADLINE_EXCEEDED, message="no result by the rollout's deadline"),
        timings=Timings(submitted_at=record.submitted_at, dispatched_at=record.dispatched_at, finished_at=now),
    )
    return rt.store.write_first(result).result


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Lambda entry point (scheduled); returns a summary of the sweep."""
    try:
        report = sweep(current_runtime())
    finally:
        flush_metrics()
    logger.info("sweep done", extra={"overdue": report.overdue, "finished": report.finished})
    return {
        "overdue": report.overdue,
        "finished": report.finished,
        "retry_later": report.retry_later,
        "inflight": report.reconciliation.inflight,
    }
