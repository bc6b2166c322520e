"""The finisher: a result object was created -> stop the session, mark the rollout finished, free its slot.

Fed by the experiment's finisher queue, whose messages are EventBridge S3 "Object Created" events.
At-least-once safe: an event for a rollout that is finished already (a duplicate, or the sweeper got
there first) changes nothing; events are never deduplicated on their id (moto repeats it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.batch import EventType

from lambdas._batch import ConcurrentBatchProcessor, handle_sqs_batch
from lambdas.finishing import finish_rollout
from lambdas.observability import lambda_entry_point, logger
from lambdas.runtime import current_runtime
from rollout_contract.events import parse_object_created
from rollout_contract.keys import is_result_key, parse_result_key

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from lambdas.runtime import Runtime
    from rollout_budgets.ledger import Transition


def finish_event(body: str, rt: Runtime) -> Transition | None:
    """Finish the rollout whose result an "Object Created" event announces; ``None`` if it is not ours.

    Raises:
        NotAnObjectCreatedEventError: the body is not such an event.
        NoTokenError: no invoke-budget slot for the stop call; retry later.
        RetryableAcrError: the stop call may pass later.
    """
    event = parse_object_created(body)
    if event.bucket != rt.settings.results_bucket or not is_result_key(event.key):
        logger.info("ignored an object that is not a result", extra={"bucket": event.bucket, "key": event.key})
        return None
    key = parse_result_key(event.key)
    if key.experiment != rt.settings.exp_id:
        logger.warning("ignored a result of another experiment", extra={"key": event.key})
        return None
    logger.thread_safe_append_keys(session_id=key.session_id)
    try:
        return finish_rollout(rt.store.read(key), rt)
    finally:
        logger.thread_safe_remove_keys(["session_id"])


def record_handler(record: SQSRecord) -> str | None:
    """Handle one finisher-queue record; a failure is logged with its reason and retried within a minute.

    Left to the queue, a failed record would come back only after the visibility timeout (six function
    timeouts), holding its rollout's session slot all that time although its result exists.
    """
    rt = current_runtime()
    try:
        transition = finish_event(record.body, rt)
    except Exception as exc:
        receives = int(record.attributes.approximate_receive_count)
        delay = retry_delay_s(receives)
        logger.exception(
            "could not finish a rollout; its event is retried",
            extra={"message_id": record.message_id, "error": f"{type(exc).__name__}: {exc}", "retry_in_s": delay},
        )
        queue_url = rt.resources.finisher_queue.sibling_url(rt.settings.dispatch_queue_url)
        rt.clients.sqs.change_message_visibility(
            QueueUrl=queue_url, ReceiptHandle=record.receipt_handle, VisibilityTimeout=delay
        )
        raise
    return transition.value if transition else None


#: The longest a failed finish waits for its retry: the sweeper's period, so a result never holds a slot longer.
MAX_RETRY_DELAY_S = 60


def retry_delay_s(receive_count: int) -> int:
    """Seconds before a failed finish is tried again: 5 s doubling per receive, at most a minute."""
    return min(MAX_RETRY_DELAY_S, 5 << max(receive_count - 1, 0))


#: Records of one batch finished in parallel: each waits on a stop (its TPS token and ACR's answer), and
#: the slot it frees is what the next rollout's dispatch is waiting for.
FINISH_WORKERS = 10
processor = ConcurrentBatchProcessor(EventType.SQS, max_workers=FINISH_WORKERS)


@lambda_entry_point
def handler(event: dict[str, Any], context: LambdaContext | None) -> PartialItemFailureResponse:
    """Lambda entry point: a batch of finisher-queue records, partial batch failures reported."""
    return handle_sqs_batch(event, context, record_handler=record_handler, processor=processor)
