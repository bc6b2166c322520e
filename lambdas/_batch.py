"""A powertools ``BatchProcessor`` that handles a batch's records in parallel threads."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType


class ConcurrentBatchProcessor(BatchProcessor):
    """Process the records of one batch on up to ``max_workers`` threads; results as ``BatchProcessor``.

    Dispatching waits on the invoke budget and on ACR's answer; records of one batch wait in parallel.
    A batch whose records all failed is reported record by record too (each carries its own delay).
    """

    def __init__(self, event_type: EventType, *, max_workers: int) -> None:
        super().__init__(event_type, raise_on_entire_batch_failure=False)
        self.max_workers = max_workers

    def process(self) -> list[tuple]:
        """Call the record handler for every record, concurrently."""
        if len(self.records) <= 1:
            return super().process()
        with ThreadPoolExecutor(max_workers=min(self.max_workers, len(self.records))) as pool:
            return list(pool.map(self._process_record, self.records))
