"""SQS batch handling shared by the queue-fed Lambdas: a parallel ``BatchProcessor`` and the handler body."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response

from lambdas.observability import add_metric
from lambdas.runtime import current_runtime
from rollout_contract import metrics as names

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.batch.base import FailureResponse, SuccessResponse
    from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
    from aws_lambda_powertools.utilities.typing import LambdaContext


class ConcurrentBatchProcessor(BatchProcessor):
    """Process the records of one batch on up to ``max_workers`` threads; results as ``BatchProcessor``.

    Dispatching waits on the invoke budget and on ACR's answer; records of one batch wait in parallel.
    A batch whose records all failed is reported record by record too (each carries its own delay).
    """

    def __init__(self, event_type: EventType, *, max_workers: int) -> None:
        super().__init__(event_type, raise_on_entire_batch_failure=False)
        self.max_workers = max_workers

    def process(self) -> list[SuccessResponse | FailureResponse]:
        """Call the record handler for every record, concurrently."""
        if len(self.records) <= 1:
            return super().process()
        with ThreadPoolExecutor(max_workers=min(self.max_workers, len(self.records))) as pool:
            return list(pool.map(self._process_record, self.records))


def handle_sqs_batch(
    event: dict[str, Any],
    context: LambdaContext | None,
    *,
    record_handler: Callable[[SQSRecord], Any],
    processor: BatchProcessor,
) -> PartialItemFailureResponse:
    """The body of a queue-fed handler: build the runtime, process the records, report partial failures.

    Call it from a handler wrapped in :func:`lambdas.observability.lambda_entry_point`, which flushes the
    metrics whatever happens (the batch size is recorded first, so every invocation has one). The invoke
    budgets expect a slot per record (shared out over the runtime's endpoints), so the batch's invokes or stops
    share runs of slots.
    """
    records = len(event.get("Records", []))
    add_metric(names.BATCH_RECORDS, records)
    acrs = current_runtime().acrs
    with ExitStack() as expectations:
        for acr in acrs:
            expectations.enter_context(acr.tps.expecting(-(-records // len(acrs))))
        return process_partial_response(
            event=event, record_handler=record_handler, processor=processor, context=context
        )
