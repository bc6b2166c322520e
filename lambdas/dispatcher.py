"""The dispatcher: dispatch-queue messages -> ``InvokeAgentRuntime`` under the TPS and session budgets.

A start message walks a rollout through the sessions table: ``queued`` (recorded) -> ``admitted`` (holds
a session slot, leased to one dispatcher, the attempt counted) -> ``running`` (the invoke was accepted).
On a first receive with a free slot, recording and admitting are one transaction that creates the item
admitted (:meth:`~rollout_budgets.ledger.Ledger.start`); the happy path is that transaction, an invoke token and
the ``running`` write. Every step is a conditional write keyed on the session id, so a redelivered
message, or one redelivered after a crash between two steps, never starts a second rollout: a rollout
that is running or finished, or whose result object exists, is not invoked again. A start that creates
a brand-new item skips the result check: every
writer of a result leaves the item first (a cancel marks it, the dispatcher and the sweeper write
results only for recorded rollouts, the agent only after an invoke), and an item outlives every message
of its rollout (its TTL is 7 days after the deadline or the end; the dispatch queue keeps messages 4 days).

A start that finds every session slot taken waits for one in the function (:mod:`rollout_budgets.slot_wait`: one
read of the slot count per poll for the whole batch, the admission as soon as a read sees a slot free),
bounded by the function's time left and the rollout's start limit, as an invoke waits for its token. A
first receive writes nothing while it waits (its admission is the same start transaction, tried again)
and is recorded ``queued`` only if the wait runs out.
What cannot happen now goes back to the queue with a delay (:class:`~lambdas.exceptions.RequeueError`):
no session slot within that wait, the invoke budget reserved beyond the wait allowed, or a retryable
ACR error.
Final ACR errors, exhausted attempts, payloads that cannot be read or used, and start messages that
do not parse but name a rollout of this experiment end the rollout as a ``dispatch_failed`` result that
says why (a message that names no rollout goes to the dead-letter queue), as does a start message past
its queue timeout (``QueueWaitExceeded``); the rollout's own timeout runs from its start. Either way
the trainer hears of it through the completion queue, and the finisher frees the slot.
"""

from __future__ import annotations

import json
import math
import uuid
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.batch import EventType
from botocore.exceptions import ClientError
from pydantic import ValidationError

from lambdas._batch import ConcurrentBatchProcessor, handle_sqs_batch
from lambdas.exceptions import RequeueError
from lambdas.finishing import stop_session
from lambdas.observability import add_metric, emit_with_dimensions, lambda_entry_point, logger
from lambdas.runtime import current_runtime
from rollout_budgets.errors import AcrCallError, FinalAcrError, NoTokenError, RetryableAcrError
from rollout_budgets.ledger import Admission, Recorded
from rollout_contract import metrics as names
from rollout_contract.aws import error_code
from rollout_contract.ids import split_exp_id, validate_input_id, validate_rollout_session_id
from rollout_contract.keys import ResultKey
from rollout_contract.messages import CancelRequest, DispatchRequest, parse_dispatch_message
from rollout_contract.results import PROOF_KEY_FIELD, ROLLOUT_FIELD, ErrorInfo, RolloutResult, Status, Timings
from rollout_contract.sessions import SessionState

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from lambdas.runtime import Runtime
    from rollout_budgets.ledger import Started
    from rollout_contract.sessions import SessionRecord

#: Records of one batch dispatched in parallel.
DISPATCH_WORKERS = 10
#: Delay before retrying after a retryable ACR error: doubles per attempt from the base, up to the cap.
RETRY_BASE_S = 1.0
RETRY_CAP_S = 300.0
#: Delay while waiting for a session slot: 1 s for the first QUICK_SLOT_RETRIES receives, then one more
#: second per receive, up to the cap. Slots free up continuously (a finisher frees one moments after each
#: result), so the first retries come quickly; the cap bounds the receives a long backlog costs (one per
#: message per cap).
QUICK_SLOT_RETRIES = 5
SLOT_WAIT_CAP_S = 30.0
#: Time an invocation keeps after waiting for a session slot: the invoke token's wait
#: (:data:`rollout_budgets.acr.INVOKE_WAIT_S`), the invoke, the writes and the visibility changes of the batch.
SLOT_WAIT_RESERVE_S = 15.0
#: Delay after losing a race with another copy of the same message.
RACE_DELAY_S = 1.0
#: ``ErrorInfo.type`` of a rollout that could not start within its queue timeout.
QUEUE_WAIT_EXCEEDED = "QueueWaitExceeded"
#: SQS refuses visibility timeouts above 12 hours.
_MAX_VISIBILITY_S = 12 * 3600
_NOT_FOUND = frozenset({"NoSuchKey", "404", "NotFound"})
_DENIED = frozenset({"AccessDenied", "403"})


class DispatchOutcome(StrEnum):
    """What handling one dispatch-queue message did."""

    INVOKED = "invoked"
    ALREADY_STARTED = "already_started"  # running or finished: a redelivery
    RESULT_EXISTS = "result_exists"  # ended before it started (cancelled, ...)
    FAILED = "failed"  # dispatch_failed result written
    ENDED_WHILE_STARTING = "ended_while_starting"  # cancelled or timed out during the invoke; stopped
    CANCELLED = "cancelled"  # cancelled result written
    CANCEL_TOO_LATE = "cancel_too_late"  # a result existed already


def retry_delay_s(attempt: int) -> float:
    """Seconds to wait before invoke attempt ``attempt + 1`` after a retryable error."""
    return min(RETRY_CAP_S, RETRY_BASE_S * 2.0 ** max(attempt - 1, 0))


def slot_wait_delay_s(receive_count: int) -> float:
    """Seconds to wait for a session slot on the ``receive_count``-th receive of a message."""
    return min(SLOT_WAIT_CAP_S, float(max(receive_count - QUICK_SLOT_RETRIES, 1)))


def cancel(request: CancelRequest, rt: Runtime) -> DispatchOutcome:
    """End a rollout as ``cancelled`` unless it has a result already; the finisher then stops it."""
    record = rt.ledger.mark_cancel_requested(
        request.session_id, requested_at=request.requested_at, trainer=request.trainer
    )
    timings = Timings(
        submitted_at=record.submitted_at if record else None,
        dispatched_at=record.dispatched_at if record else None,
        finished_at=request.requested_at,
    )
    result = RolloutResult.terminal(
        Status.CANCELLED,
        key=request.key,
        s3_bucket=rt.settings.results_bucket,
        stop_reason="cancelled by the trainer",
        timings=timings,
    )
    stored = rt.store.write_first(result)
    return DispatchOutcome.CANCELLED if stored.written else DispatchOutcome.CANCEL_TOO_LATE


def dispatch(
    request: DispatchRequest, *, receive_count: int, rt: Runtime, slot_wait_until: float | None = None
) -> DispatchOutcome:
    """Start one rollout at most once, within the session and TPS budgets.

    A first receive that is in time and whose payload is usable is recorded, admitted and counted in one
    transaction (:meth:`~rollout_budgets.ledger.Ledger.start`, tried again after each wait for a slot); anything else
    goes the step-by-step way. A rollout that finds no free session slot waits for one in the function until
    ``slot_wait_until`` (Unix time; ``None``: no wait), never past its start limit.

    Raises:
        RequeueError: no slot within the wait or no token now, a retryable ACR error, or a race with another copy.
    """
    now = rt.clock()
    owner = uuid.uuid4().hex
    lease_until = now + rt.resources.dispatch_queue.visibility_timeout_s
    loaded = _load_payload(request, rt) if receive_count == 1 and now < request.start_by else None
    # While records of this process wait for a slot, an admission tried now would find none: wait with them.
    others_wait = slot_wait_until is not None and rt.slots.waiters > 0
    slots = _SlotWait(request, receive_count, slot_wait_until, rt, seen_taken=others_wait)
    recorded: Recorded | None = None
    if isinstance(loaded, dict):
        started = _start(request, owner=owner, lease_until=lease_until, slots=slots, rt=rt)
        if started.admission is Admission.ADMITTED:
            return _invoke(request, loaded, owner=owner, attempts=1, rt=rt)
        if started.found is not None:
            recorded = Recorded(started.found, new=False)
    record, new = recorded or _record(request, receive_count, rt)
    if record.state in (SessionState.RUNNING, SessionState.FINISHED):
        return DispatchOutcome.ALREADY_STARTED
    if not new and rt.store.exists(request.key):
        return DispatchOutcome.RESULT_EXISTS
    if now >= request.start_by:
        error = ErrorInfo(
            type=QUEUE_WAIT_EXCEEDED,
            message=f"not started within queue_timeout_s={request.queue_timeout_s:g}: no free session or invoke "
            "capacity in time; raise the quotas or the queue timeout, or submit fewer at once",
        )
        return _fail(request, error, rt, dispatched_at=None)
    if receive_count >= rt.resources.dispatch_queue.max_receive_count:
        error = ErrorInfo(type="DispatchAttemptsExhausted", message=f"not started after {receive_count} receives")
        return _fail(request, error, rt, dispatched_at=record.dispatched_at)
    if loaded is None:
        loaded = _load_payload(request, rt)
    if isinstance(loaded, ErrorInfo):
        return _fail(request, loaded, rt, dispatched_at=None)
    attempts = _admit(request, record, owner=owner, lease_until=lease_until, slots=slots, rt=rt)
    return _invoke(request, loaded, owner=owner, attempts=attempts, rt=rt)


def _start(request: DispatchRequest, *, owner: str, lease_until: float, slots: _SlotWait, rt: Runtime) -> Started:
    """Record and admit a first receive in one transaction, waiting in the function while no slot is free.

    Nothing is written while it waits: each try is the same transaction, which creates the item only if
    there is none. A start whose wait runs out is recorded ``queued`` before it goes back to the queue, so
    its next receive finds its item. ``NO_SLOT`` is never returned.

    Raises:
        RequeueError: no session slot came free within the wait.
    """
    while True:
        try:
            slots.before_admission()
        except RequeueError:
            _record_queued(request, rt)
            raise
        started = rt.ledger.start(
            request.key,
            submitted_at=request.submitted_at,
            deadline_at=request.deadline_at,
            trainer=request.trainer,
            owner=owner,
            lease_until=lease_until,
        )
        if started.admission is not Admission.NO_SLOT:
            return started
        slots.seen_taken = True


def _record(request: DispatchRequest, receive_count: int, rt: Runtime) -> Recorded:
    """The rollout's item, recorded as ``queued`` if no start recorded it before.

    A message received before most likely has its item already, so it is read first (a read costs a
    fifth of a write); a first receive writes at once, and the write returns whatever item it met.
    """
    if receive_count > 1:
        record = rt.ledger.get(request.session_id)
        if record is not None:
            return Recorded(record, new=False)
    return _record_queued(request, rt)


def _record_queued(request: DispatchRequest, rt: Runtime) -> Recorded:
    return rt.ledger.record_queued(
        request.key, submitted_at=request.submitted_at, deadline_at=request.deadline_at, trainer=request.trainer
    )


class _SlotWait:
    """One rollout's wait for a free session slot: in the function while time allows, then back to the queue."""

    def __init__(
        self, request: DispatchRequest, receive_count: int, until: float | None, rt: Runtime, *, seen_taken: bool
    ) -> None:
        self._request = request
        self._receive_count = receive_count
        self._until = until
        self._rt = rt
        #: An admission found every slot taken: wait before the next one.
        self.seen_taken = seen_taken
        self._counted = False

    def before_admission(self) -> None:
        """Return when an admission may find a free slot; raise :class:`RequeueError` when the wait ran out."""
        if not self.seen_taken:
            return
        if not self._counted:  # this record takes no invoke token before it has a session slot
            for acr in self._rt.acrs:
                acr.tps.expect_fewer()
            self._counted = True
        if self._until is not None and self._rt.slots.wait(min(self._until, self._request.start_by)):
            return
        # Never wait past the start limit: the next receive ends a rollout that never got a slot.
        left = self._request.start_by - self._rt.clock()
        raise RequeueError("no free session slot", min(slot_wait_delay_s(self._receive_count), max(RACE_DELAY_S, left)))


def _admit(
    request: DispatchRequest, record: SessionRecord, *, owner: str, lease_until: float, slots: _SlotWait, rt: Runtime
) -> int:
    """Take a session slot (or the slot of a dispatcher whose lease ran out) for ``owner``; return the attempt."""
    if record.state is SessionState.QUEUED:
        while True:
            slots.before_admission()
            admission = rt.ledger.admit(
                record.session_id, attempts_seen=record.attempts, owner=owner, lease_until=lease_until
            )
            if admission is Admission.ADMITTED:
                return record.attempts + 1
            if admission is Admission.STATE_CHANGED:
                raise RequeueError("the rollout changed state meanwhile", RACE_DELAY_S)
            slots.seen_taken = True
    now = rt.clock()
    if record.lease_until is not None and record.lease_until > now:
        raise RequeueError("another dispatcher holds the rollout", record.lease_until - now)
    attempts = rt.ledger.take_over(
        request.session_id, owner=owner, previous_owner=record.lease_owner, now=now, lease_until=lease_until
    )
    if attempts is None:
        raise RequeueError("another dispatcher took the rollout over", RACE_DELAY_S)
    logger.warning("took over a rollout whose dispatcher stopped", extra={"session_id": request.session_id})
    return attempts


def _invoke(
    request: DispatchRequest, payload: dict[str, Any], *, owner: str, attempts: int, rt: Runtime
) -> DispatchOutcome:
    """Invoke an admitted rollout in a reserved TPS slot and record the outcome; its timeout runs from now."""
    ledger, session_id = rt.ledger, request.session_id
    try:
        acr, slot_start = rt.reserve_invoke()
    except NoTokenError as exc:
        ledger.release_to_queued(session_id, owner=owner, deadline_at=request.deadline_at, attempted=False)
        raise RequeueError("invoke budget reserved beyond the invoke horizon", exc.retry_after_s) from exc
    deadline_at = request.run_deadline(rt.clock())
    invoke_payload = request.invoke_payload(payload, rt.settings.results_bucket)
    rollout = invoke_payload[ROLLOUT_FIELD]
    rollout.update(Timings(submitted_at=request.submitted_at, dispatched_at=slot_start).model_dump(exclude_none=True))
    rollout[PROOF_KEY_FIELD] = rt.store.session_key(session_id)  # the agent signs its result with it (D100)
    try:
        acr.invoke(session_id, acr.encode(invoke_payload), slot_start=slot_start)
    except NoTokenError as exc:
        ledger.release_to_queued(session_id, owner=owner, deadline_at=request.deadline_at, attempted=False)
        raise RequeueError("invoke slot missed and none free within the allowed wait", exc.retry_after_s) from exc
    except AcrCallError as exc:
        return _invoke_failed(request, exc, attempts=attempts, owner=owner, slot_start=slot_start, rt=rt)
    add_metric(names.INVOKED, 1)
    if ledger.mark_running(
        session_id, owner=owner, dispatched_at=slot_start, deadline_at=deadline_at, endpoint=acr.qualifier
    ):
        logger.info("rollout invoked", extra={"session_id": session_id, "attempt": attempts})
        return DispatchOutcome.INVOKED
    record = ledger.get(session_id)
    if record is not None and record.state is SessionState.FINISHED:
        logger.info("rollout ended while it was being invoked; stopping it", extra={"session_id": session_id})
        try:
            stop_session(session_id, acr)
        except (NoTokenError, RetryableAcrError) as exc:
            logger.warning(
                "could not stop a session that ended while starting; its idle timeout ends it",
                extra={"session_id": session_id, "error": str(exc)},
            )
        return DispatchOutcome.ENDED_WHILE_STARTING
    logger.warning("another dispatcher took the rollout over during the invoke", extra={"session_id": session_id})
    return DispatchOutcome.INVOKED


def _invoke_failed(
    request: DispatchRequest, exc: AcrCallError, *, attempts: int, owner: str, slot_start: float, rt: Runtime
) -> DispatchOutcome:
    emit_with_dimensions(names.DISPATCH_ERRORS, {names.ERROR_CODE_DIMENSION: exc.code})
    log_fields = {"session_id": request.session_id, "error_code": exc.code, "attempt": attempts}
    error = ErrorInfo(type=exc.code, message=f"InvokeAgentRuntime failed: {exc.message}"[:1000])
    if isinstance(exc, FinalAcrError):
        logger.error("invoke failed for good", extra=log_fields)
        return _fail(request, error, rt, dispatched_at=slot_start)
    if attempts >= rt.settings.max_dispatch_attempts:
        logger.error("invoke attempts exhausted", extra=log_fields)
        exhausted = ErrorInfo(type=exc.code, message=f"{error.message} (attempt {attempts}, no retries left)")
        return _fail(request, exhausted, rt, dispatched_at=slot_start)
    rt.ledger.release_to_queued(request.session_id, owner=owner, deadline_at=request.deadline_at, attempted=True)
    logger.warning("invoke failed, will retry", extra=log_fields)
    raise RequeueError(f"InvokeAgentRuntime returned {exc.code}", retry_delay_s(attempts)) from exc


def _fail(request: DispatchRequest, error: ErrorInfo, rt: Runtime, *, dispatched_at: float | None) -> DispatchOutcome:
    _end(request, Status.DISPATCH_FAILED, error, rt, dispatched_at=dispatched_at)
    return DispatchOutcome.FAILED


def _end(
    request: DispatchRequest, status: Status, error: ErrorInfo, rt: Runtime, *, dispatched_at: float | None
) -> None:
    """Write the rollout's terminal result (an existing result wins); the finisher does the rest."""
    timings = Timings(submitted_at=request.submitted_at, dispatched_at=dispatched_at, finished_at=rt.clock())
    result = RolloutResult.terminal(
        status, key=request.key, s3_bucket=rt.settings.results_bucket, error=error, timings=timings
    )
    stored = rt.store.write_first(result)
    logger.info(
        "rollout ended by the dispatcher",
        extra={"session_id": request.session_id, "status": stored.result.status.value, "written": stored.written},
    )


def _load_payload(request: DispatchRequest, rt: Runtime) -> dict[str, Any] | ErrorInfo:
    """The agent payload (inline or parked), or why the agent cannot be invoked with it."""
    try:
        return _payload(request, rt)
    except (ClientError, ValueError) as exc:
        return _payload_error(request, exc, rt)


def _payload(request: DispatchRequest, rt: Runtime) -> dict[str, Any]:
    """The agent payload (inline or parked); ``ValueError`` when the agent could not be invoked with it."""
    if request.payload is not None:
        payload = request.payload
    elif request.payload_ref is None:
        raise ValueError("the dispatch request has neither payload nor payload_ref; give exactly one")
    else:
        payload = rt.store.read_payload(request.payload_ref)
    block = payload.get(ROLLOUT_FIELD)
    if block is not None and not isinstance(block, dict):
        raise ValueError(f"payload field {ROLLOUT_FIELD!r} must be an object, got {type(block).__name__}")
    return payload


def _payload_error(request: DispatchRequest, exc: ClientError | ValueError, rt: Runtime) -> ErrorInfo:
    if isinstance(exc, ClientError):
        code = error_code(exc)
        # A missing key is 403 to a caller that may not list the whole bucket: a list of the key settles it.
        missing = code in _NOT_FOUND or (code in _DENIED and not rt.store.exists(str(request.payload_ref)))
        if not missing:
            raise exc
        return ErrorInfo(type="PayloadNotFound", message=f"no payload at s3 key {request.payload_ref}")
    return ErrorInfo(type="InvalidPayload", message=str(exc))


def _start_key(body: str, rt: Runtime) -> ResultKey | None:
    """The rollout a malformed start message is about, if its ids are usable and name this experiment."""
    try:
        fields = json.loads(body)
        if not isinstance(fields, dict) or fields.get("kind", "start") != "start":
            return None
        experiment, _ = split_exp_id(fields["exp_id"])
        key = ResultKey(
            fields["exp_id"], validate_input_id(fields["input_id"]), validate_rollout_session_id(fields["session_id"])
        )
    except (ValueError, KeyError, TypeError):
        return None
    return key if experiment == rt.settings.exp_id else None


def _end_unusable(key: ResultKey, exc: ValidationError, rt: Runtime) -> DispatchOutcome:
    """End the rollout of a start message the dispatcher cannot use as ``dispatch_failed``, saying why."""
    reasons = "; ".join(
        f"{'.'.join(str(part) for part in error['loc']) or 'message'}: {error['msg']}"
        for error in exc.errors(include_input=False, include_url=False)
    )
    error = ErrorInfo(type="InvalidDispatchRequest", message=f"the dispatch request is unusable: {reasons}"[:1000])
    result = RolloutResult.terminal(
        Status.DISPATCH_FAILED,
        key=key,
        s3_bucket=rt.settings.results_bucket,
        error=error,
        timings=Timings(finished_at=rt.clock()),
    )
    stored = rt.store.write_first(result)
    add_metric(names.DEAD_LETTERED, 1)
    logger.error(
        "unusable start message: rollout ended as dispatch_failed",
        extra={"session_id": key.session_id, "reason": error.message, "written": stored.written},
    )
    return DispatchOutcome.FAILED


#: What :func:`record_handler` returns for a message it moved to the dead-letter queue.
DEAD_LETTERED = "dead_lettered"


def record_handler(record: SQSRecord, lambda_context: LambdaContext | None = None) -> str:
    """Handle one SQS record; a :class:`RequeueError` sets its visibility to the delay and fails it.

    A start may wait for a session slot until :data:`SLOT_WAIT_RESERVE_S` before the function's timeout
    (no wait without a context).
    """
    rt = current_runtime()
    try:
        message = parse_dispatch_message(record.body)
    except ValidationError as exc:
        key = _start_key(record.body, rt)
        if key is not None:
            return _end_unusable(key, exc, rt).value
        # No retry can fix it, and no rollout can be named: move it to the dead-letter queue now instead of
        # after 1,000 receives.
        dead_letter_url = rt.resources.dispatch_queue.dlq_url(rt.settings.dispatch_queue_url)
        rt.clients.sqs.send_message(QueueUrl=dead_letter_url, MessageBody=record.body)
        add_metric(names.DEAD_LETTERED, 1)
        logger.error(
            "unparseable dispatch message moved to the dead-letter queue",
            extra={"message_id": record.message_id, "errors": exc.errors(include_input=False, include_url=False)},
        )
        return DEAD_LETTERED
    logger.thread_safe_append_keys(session_id=message.session_id)
    try:
        if isinstance(message, CancelRequest):
            return cancel(message, rt).value
        receive_count = int(record.attributes.approximate_receive_count)
        slot_wait_until = None
        if lambda_context is not None:
            slot_wait_until = rt.clock() + lambda_context.get_remaining_time_in_millis() / 1000 - SLOT_WAIT_RESERVE_S
        return dispatch(message, receive_count=receive_count, rt=rt, slot_wait_until=slot_wait_until).value
    except RequeueError as exc:
        delay = min(_MAX_VISIBILITY_S, max(1, math.ceil(exc.delay_s)))
        rt.clients.sqs.change_message_visibility(
            QueueUrl=rt.settings.dispatch_queue_url, ReceiptHandle=record.receipt_handle, VisibilityTimeout=delay
        )
        add_metric(names.REQUEUED, 1)
        logger.info("message requeued", extra={"reason": exc.reason, "delay_s": delay})
        raise
    finally:
        logger.thread_safe_remove_keys(["session_id"])


processor = ConcurrentBatchProcessor(EventType.SQS, max_workers=DISPATCH_WORKERS)


@lambda_entry_point
def handler(event: dict[str, Any], context: LambdaContext | None) -> PartialItemFailureResponse:
    """Lambda entry point: a batch of dispatch-queue records, partial batch failures reported."""
    return handle_sqs_batch(event, context, record_handler=record_handler, processor=processor)
