"""The one way a rollout becomes finished: mark it finished, free its slot, stop its session, count it.

Used by the finisher (on every result event) and the sweeper (at the deadline). When the agent stored its
result (``succeeded``, ``agent_error``) its work is done, and its session slot is freed at once, not when its
stop comes back: the stop's invoke-budget token is reserved first, then the transition frees the slot, then
the stop goes out in its token's slot. So the invoke that the freed slot lets in takes a later token than the
stop, and a stop that waits for its token (stops share the budget with invokes) or fails holds no slot
meanwhile; a failed stop raises after the transition, the event comes back, its transition finds the rollout
finished already and the stop is tried again (ACR's idle timeout ends an idle session that is never stopped).
When the agent may still be running (``timed_out``, ``cancelled``) the session is stopped before the
transition, so its slot is held until the session is gone and a rollout the sweeper cannot stop stays in
flight (``RolloutsOverdue``). A later event for a finished rollout (a duplicate, or the sweeper's own
``timed_out`` result) changes nothing in the tables: its stop finds no session. No read comes first: on the
happy path a finish costs the stop's token and one transaction.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from aws_lambda_powertools.metrics import MetricUnit

from lambdas.observability import add_metric, emit_with_dimensions, logger
from rollout_budgets.errors import FinalAcrError, NoTokenError
from rollout_budgets.ledger import Transition
from rollout_contract import metrics as names
from rollout_contract.ids import RUN_SEPARATOR
from rollout_contract.results import Status

if TYPE_CHECKING:
    from lambdas.runtime import Runtime
    from rollout_budgets.acr import Acr
    from rollout_contract.keys import ResultKey
    from rollout_contract.results import RolloutResult

#: ``ErrorInfo.type`` of a rollout that had no result by its deadline.
DEADLINE_EXCEEDED = "DeadlineExceeded"
#: Statuses a rollout may end with before it ever held a session slot.
_MAY_END_UNSTARTED = frozenset({Status.DISPATCH_FAILED, Status.CANCELLED})
#: Statuses only the agent stores, once its work is done: its slot is freed before its session is stopped.
AGENT_ENDED = frozenset({Status.SUCCEEDED, Status.AGENT_ERROR})


def finish_rollout(result: RolloutResult, rt: Runtime, *, endpoint: str | None = None) -> Transition:
    """Mark ``result``'s rollout finished (its slot freed) and stop its session (unless it never started).

    The agent's own result frees the slot before the stop, in a token reserved before the slot is freed; a
    ``timed_out`` or ``cancelled`` one after it (see the module docstring). ``StopTokenWait`` and
    ``SlotFreeDelay`` say how long each took. The stop goes to the session's endpoint: ``endpoint`` when the
    caller read it (the sweeper), else the only one or, with several, the one the sessions item records.

    Raises:
        NoTokenError: no invoke-budget slot for the stop call; retry later (the agent's result: its slot is free).
        RetryableAcrError: the stop call failed in a way that may pass; retry later (likewise).
    """
    session_id = result.session_id
    if result.status is Status.DISPATCH_FAILED:
        return _finish(result, rt)
    acr = rt.endpoint(endpoint) if endpoint is not None else _session_endpoint(session_id, rt)
    if result.status not in AGENT_ENDED:
        stop_session(session_id, acr, slot_start=_reserve_stop(acr, rt))
        return _finish(result, rt)
    try:
        stop_slot = _reserve_stop(acr, rt)
    except NoTokenError:
        _finish(result, rt)  # the slot is freed all the same; the event comes back for the stop
        raise
    transition = _finish(result, rt)
    stop_session(session_id, acr, slot_start=stop_slot)
    return transition


def _session_endpoint(session_id: str, rt: Runtime) -> Acr:
    """The endpoint ``session_id`` was invoked on: the only one, or (with several) the one its item records.

    A session whose endpoint is not recorded (its dispatcher died between the invoke and the ``running`` write)
    is stopped on the first endpoint, and otherwise ends at the runtime's idle timeout.
    """
    if len(rt.acrs) == 1:
        return rt.acr
    record = rt.ledger.get(session_id)
    return rt.endpoint(record.endpoint if record is not None else None)


def _reserve_stop(acr: Acr, rt: Runtime) -> float:
    """Reserve a stop's token on ``acr``'s endpoint and count how long it waits (``StopTokenWait``)."""
    asked_at = rt.clock()
    slot = acr.reserve_stop()
    add_metric(names.STOP_TOKEN_WAIT, max(0.0, slot - asked_at), MetricUnit.Seconds)
    return slot


def _finish(result: RolloutResult, rt: Runtime) -> Transition:
    """The ``finish`` (or ``finish_unstarted``) move of ``result``'s rollout, logged and counted once."""
    session_id = result.session_id
    finished_at = result.timings.finished_at or rt.clock()
    # A rollout that was invoked holds its slot until finished; only the order of the writes tried depends on it.
    holding = result.timings.dispatched_at is not None or result.status not in _MAY_END_UNSTARTED
    transition = rt.ledger.finish(result.key, status=result.status, finished_at=finished_at, holding=holding)
    if transition is Transition.ALREADY_FINISHED:
        logger.debug("rollout already finished", extra={"session_id": session_id})
        return transition
    logger.info(
        "rollout finished",
        extra={"session_id": session_id, "status": result.status.value, "slot_freed": transition.value},
    )
    if transition is Transition.RELEASED:
        add_metric(names.SLOT_FREE_DELAY, max(0.0, rt.clock() - finished_at), MetricUnit.Seconds)
    emit_completion(result)
    return transition


def end_sandbox(key: ResultKey, rt: Runtime, *, endpoint: str | None = None) -> Transition:
    """Stop a sandbox past its deadline and free its slot, marking it ``timed_out``; no result is written.

    A sandbox's trainer reads its commands' results from the session itself, and nothing waits for a result
    object (one would only wake the finisher and every poller for nothing).

    Raises:
        NoTokenError: no invoke-budget slot for the stop call; retry later.
        RetryableAcrError: the stop call failed in a way that may pass; retry later.
    """
    stop_session(key.session_id, rt.endpoint(endpoint))
    transition = rt.ledger.finish(key, status=Status.TIMED_OUT, finished_at=rt.clock())
    if transition is not Transition.ALREADY_FINISHED:
        logger.info("sandbox stopped at its deadline", extra={"session_id": key.session_id})
        add_metric(names.SANDBOXES_EXPIRED, 1)
    return transition


def stop_session(session_id: str, acr: Acr, *, slot_start: float | None = None) -> None:
    """Stop a session on endpoint ``acr`` (in the slot reserved at ``slot_start``, or one reserved now); a session
    ACR does not know is fine, a final error is logged and counted.

    Every call ACR answers counts in ``SessionStops`` (stops share the invoke budget with invokes).

    Raises:
        NoTokenError: no invoke-budget slot for the stop call.
        RetryableAcrError: the stop may pass later.
    """
    try:
        stopped = acr.stop(session_id, slot_start=slot_start)
    except FinalAcrError as exc:
        logger.error("StopRuntimeSession failed", extra={"session_id": session_id, "error_code": exc.code})
        add_metric(names.STOPS, 1)
        add_metric(names.STOP_FAILURES, 1)
        return
    add_metric(names.STOPS, 1)
    if not stopped:
        logger.debug("session was not running", extra={"session_id": session_id})


def emit_completion(result: RolloutResult) -> None:
    """Count a finished rollout by status; record its duration, delays and reward where known.

    A rollout of a run (exp_id ``experiment/run``) is also counted, and its reward recorded, with the ``run``
    dimension, so a dashboard can show one run; the experiment's own metrics count every run.
    """
    run = result.exp_id.partition(RUN_SEPARATOR)[2]
    emit_with_dimensions(names.COMPLETED, {names.STATUS_DIMENSION: result.status.value})
    if run:
        emit_with_dimensions(names.COMPLETED, {names.STATUS_DIMENSION: result.status.value, names.RUN_DIMENSION: run})
    timings = result.timings
    if timings.duration_s is not None:
        add_metric(names.DURATION, timings.duration_s, MetricUnit.Seconds)
    if timings.dispatch_delay_s is not None:
        add_metric(names.QUEUE_DELAY, timings.dispatch_delay_s, MetricUnit.Seconds)
    if timings.started_at is not None and timings.dispatched_at is not None:
        add_metric(names.START_DELAY, timings.started_at - timings.dispatched_at, MetricUnit.Seconds)
    reward = result.reward
    if reward is not None and math.isfinite(reward):
        add_metric(names.REWARD, reward, MetricUnit.NoUnit)
        if run:
            emit_with_dimensions(names.REWARD, {names.RUN_DIMENSION: run}, reward, MetricUnit.NoUnit)
