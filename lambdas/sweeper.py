"""The sweeper: rollouts past their deadline end as ``timed_out``; the slot count is reconciled.

Runs every minute (EventBridge schedule in AWS, a timer in the local worker); the event is ignored.
For each overdue rollout it writes a ``timed_out`` result the first-writer-wins way (an agent result
already there wins) and finishes the rollout through the same transition as the finisher, so whoever is
first frees the slot. Then it publishes the in-flight and overdue gauges and reconciles the slot count.

A rollout the sweeper cannot end (the stop call throttled or failing, the result write failing, a bug) is
logged and left in flight for the next run; once its deadline is more than ``metrics.OVERDUE_GRACE_S``
behind, it counts in the ``RolloutsOverdue`` gauge, which every run publishes (0 included) and an alarm
watches. One such rollout never keeps the sweeper from the rollouts after it.
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
    """What one sweep did.

    Attributes:
        overdue: rollouts found in flight past their deadline.
        finished: of those, the ones this sweep finished (the others were finished by someone else first).
        retry_later: of those, the ones it could not end; the next sweep tries again.
        stuck: of ``retry_later``, the ones more than ``OVERDUE_GRACE_S`` past their deadline (the gauge).
        reconciliation: what the slot-count reconciliation saw and did.
    """

    overdue: int
    finished: int
    retry_later: int
    stuck: int
    reconciliation: Reconciliation


def sweep(rt: Runtime) -> SweepReport:
    """End every overdue rollout, publish the in-flight and overdue gauges and reconcile the slot count."""
    now = rt.clock()
    stuck_before = now - names.OVERDUE_GRACE_S
    overdue = finished = retry_later = stuck = 0
    for record in rt.ledger.overdue(now):
        overdue += 1
        transition = _end(record, now, rt)
        if transition is None:
            retry_later += 1
            if record.deadline_at is not None and record.deadline_at < stuck_before:
                stuck += 1
                logger.error(
                    "rollout stuck in flight past its deadline",
                    extra={"session_id": record.session_id, "overdue_s": round(now - record.deadline_at)},
                )
        elif transition is not Transition.ALREADY_FINISHED:
            finished += 1
    add_metric(names.OVERDUE, stuck)
    reconciliation = rt.ledger.reconcile(rt.clock())
    add_metric(names.IN_FLIGHT, reconciliation.inflight)
    if reconciliation.applied:
        add_metric(names.SLOT_DRIFT, reconciliation.inflight - reconciliation.held_before)
    return SweepReport(overdue, finished, retry_later, stuck, reconciliation)


def _end(record: SessionRecord, now: float, rt: Runtime) -> Transition | None:
    """End one overdue rollout as ``timed_out`` (or with the result that got there first); ``None`` if it cannot."""
    try:
        return finish_rollout(_timed_out_or_existing(record, now, rt), rt)
    except (NoTokenError, RetryableAcrError) as exc:
        logger.warning(
            "could not end an overdue rollout yet", extra={"session_id": record.session_id, "error": str(exc)}
        )
    except Exception:
        # Anything else (result write refused, a table error, a bug) must not end the pass: the rollouts after
        # this one (later deadlines) would never be swept. Logged with its traceback, tried again next run.
        logger.exception("failed to end an overdue rollout", extra={"session_id": record.session_id})
    return None


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
    summary = {
        "overdue": report.overdue,
        "finished": report.finished,
        "retry_later": report.retry_later,
        "stuck": report.stuck,
        "inflight": report.reconciliation.inflight,
    }
    logger.info("sweep done", extra=summary)
    return summary
