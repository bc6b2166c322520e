"""The sweeper: rollouts past their deadline end as ``timed_out``; the slot count is reconciled.

Runs every minute (EventBridge schedule in AWS, a timer in the local worker); the event is ignored.
For each overdue rollout it writes a ``timed_out`` result the first-writer-wins way (an agent result
already there wins) and finishes the rollout through the same transition as the finisher, so whoever is
first frees the slot. An overdue sandbox (``rollout_contract.sandbox``) is stopped and finished the same way,
with no result written. Then it publishes the in-flight and overdue gauges and reconciles the slot count.

Overdue rollouts are ended on ``SWEEP_WORKERS`` threads: each stop waits for a token from the shared invoke
budget and then for ACR's answer, so after a mass failure (an AZ event, a thousand agents dying at once)
the stops overlap while the budget still bounds their rate. A run takes a new rollout only while more than
``TIME_MARGIN_S`` of its time budget is left (the Lambda context's remaining time); the rest are left in
flight, earliest deadline first, for the next run, and the gauges and metrics always go out.

A rollout the sweeper cannot end (the stop call throttled or failing, the result write failing, a bug) is
logged and left in flight for the next run; once its deadline is more than ``metrics.OVERDUE_GRACE_S``
behind, it counts in the ``RolloutsOverdue`` gauge, which every run publishes (0 included) and an alarm
watches, as does a rollout left untried because the time budget was spent. One such rollout never keeps
the sweeper from the rollouts after it.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lambdas.finishing import DEADLINE_EXCEEDED, end_sandbox, finish_rollout
from lambdas.observability import add_metric, lambda_entry_point, logger
from lambdas.runtime import current_runtime
from rollout_budgets.errors import NoTokenError, RetryableAcrError
from rollout_budgets.ledger import Reconciliation, Transition
from rollout_contract import metrics as names
from rollout_contract.keys import ResultKey
from rollout_contract.results import ErrorInfo, RolloutResult, Status, Timings
from rollout_contract.sandbox import is_sandbox_session

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from aws_lambda_powertools.utilities.typing import LambdaContext

    from lambdas.runtime import Runtime
    from rollout_contract.sessions import SessionRecord

#: Overdue rollouts ended at once. Each waits on its stop (a token from the shared invoke budget, which
#: bounds the rate, then ACR's answer); boto3 keeps 10 connections per client, so more would queue there.
SWEEP_WORKERS = 10
#: Seconds of a run's time budget kept back after the last rollout is taken: the stops in progress (a token
#: wait of up to ``runtime.MAX_TOKEN_WAIT_S``, ACR's answer, the result and ledger writes), then the
#: reconciliation, the gauges and the metrics flush.
TIME_MARGIN_S = 10.0


@dataclass(frozen=True)
class SweepReport:
    """What one sweep did.

    Attributes:
        overdue: rollouts found in flight past their deadline.
        finished: of those, the ones this sweep finished (the others were finished by someone else first).
        retry_later: of those, the ones it tried and could not end; the next sweep tries again.
        left_for_next_run: of those, the ones it did not try because the run's time budget was spent.
        stuck: of those still in flight (``retry_later`` and ``left_for_next_run``), the ones more than
            ``OVERDUE_GRACE_S`` past their deadline (the gauge).
        reconciliation: what the slot-count reconciliation saw and did.
    """

    overdue: int
    finished: int
    retry_later: int
    left_for_next_run: int
    stuck: int
    reconciliation: Reconciliation


def sweep(rt: Runtime, *, time_left_s: Callable[[], float] | None = None) -> SweepReport:
    """End overdue rollouts while time is left, publish the in-flight and overdue gauges, reconcile the slots.

    Args:
        rt: the function's runtime.
        time_left_s: seconds left in this run's time budget (the handler passes the Lambda context's remaining
            time); a rollout is taken only while more than ``TIME_MARGIN_S`` are left. ``None``: no limit.
    """
    now = rt.clock()
    records = list(rt.ledger.overdue(now))
    ended = _end_all(records, now, rt, time_left_s)
    stuck_before = now - names.OVERDUE_GRACE_S
    finished = retry_later = left = stuck = 0
    for index, record in enumerate(records):
        transition = ended.get(index)
        if transition is not None:
            if transition is not Transition.ALREADY_FINISHED:
                finished += 1
            continue
        tried = index in ended
        if tried:
            retry_later += 1
        else:
            left += 1
        if record.deadline_at is not None and record.deadline_at < stuck_before:
            stuck += 1
            logger.error(
                "rollout stuck in flight past its deadline",
                extra={"session_id": record.session_id, "overdue_s": round(now - record.deadline_at), "tried": tried},
            )
    if left:
        logger.warning(
            "time budget spent; overdue rollouts left for the next run",
            extra={"left_for_next_run": left, "tried": len(ended)},
        )
    add_metric(names.OVERDUE, stuck)
    reconciliation = rt.ledger.reconcile(rt.clock())
    add_metric(names.IN_FLIGHT, reconciliation.inflight)
    if reconciliation.applied:
        add_metric(names.SLOT_DRIFT, reconciliation.inflight - reconciliation.held_before)
    return SweepReport(len(records), finished, retry_later, left, stuck, reconciliation)


def _end_all(
    records: Sequence[SessionRecord], now: float, rt: Runtime, time_left_s: Callable[[], float] | None
) -> dict[int, Transition | None]:
    """End ``records`` in order on up to ``SWEEP_WORKERS`` threads while time is left; outcomes by index."""
    ended: dict[int, Transition | None] = {}
    pending = iter(enumerate(records))
    lock = threading.Lock()
    spent = False

    def take() -> tuple[int, SessionRecord] | None:
        nonlocal spent
        with lock:
            spent = spent or (time_left_s is not None and time_left_s() <= TIME_MARGIN_S)
            return None if spent else next(pending, None)

    def work() -> None:
        while (taken := take()) is not None:
            index, record = taken
            ended[index] = _end(record, now, rt)

    workers = min(SWEEP_WORKERS, len(records))
    if workers:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sweeper") as pool:
            for future in [pool.submit(work) for _ in range(workers)]:
                future.result()
    return ended


def _end(record: SessionRecord, now: float, rt: Runtime) -> Transition | None:
    """End one overdue rollout as ``timed_out`` (or with the result that got there first), or stop an overdue
    sandbox (no result); ``None`` if it cannot."""
    try:
        if is_sandbox_session(record.session_id):
            return end_sandbox(_key(record, rt), rt, endpoint=record.endpoint)
        return finish_rollout(_timed_out_or_existing(record, now, rt), rt, endpoint=record.endpoint)
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
    key = _key(record, rt)
    result = RolloutResult.terminal(
        Status.TIMED_OUT,
        key=key,
        s3_bucket=rt.settings.results_bucket,
        error=ErrorInfo(type=DEADLINE_EXCEEDED, message="no result by the rollout's deadline"),
        timings=Timings(submitted_at=record.submitted_at, dispatched_at=record.dispatched_at, finished_at=now),
    )
    return rt.store.write_first(result).result


def _key(record: SessionRecord, rt: Runtime) -> ResultKey:
    return ResultKey(record.exp_id or rt.settings.exp_id, record.input_id or "", record.session_id)


@lambda_entry_point
def handler(event: dict[str, Any], context: LambdaContext | None) -> dict[str, Any]:
    """Lambda entry point (scheduled); returns a summary of the sweep.

    With a context, the sweep takes no new rollout once less than ``TIME_MARGIN_S`` is left before the
    function's timeout; without one (a direct call), it has no time limit.
    """
    add_metric(names.SWEEPER_RUNS, 1)
    time_left_s = None if context is None else lambda: context.get_remaining_time_in_millis() / 1000
    report = sweep(current_runtime(), time_left_s=time_left_s)
    summary = {
        "overdue": report.overdue,
        "finished": report.finished,
        "retry_later": report.retry_later,
        "left_for_next_run": report.left_for_next_run,
        "stuck": report.stuck,
        "inflight": report.reconciliation.inflight,
    }
    logger.info("sweep done", extra=summary)
    return summary
