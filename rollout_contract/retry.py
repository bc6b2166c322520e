"""Retrying what botocore's standard mode does not (D79), one way.

botocore retries throttling, 5xx, timeouts and dropped connections inside every client
(:class:`~rollout_contract.aws.ClientFactory`). What is left are answers that only our code knows may pass on
another try: a DynamoDB transaction cancelled by a concurrent one, an S3 conditional write racing another
(``ConditionalRequestConflict``), entries an SQS batch refused, an ACR call whose every attempt must spend its own
invoke-budget token. Each such loop is a :class:`RetryPolicy`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field

from rollout_contract.aws import error_code, error_reasons

__all__ = ["TRANSACTION_CONFLICTS", "RetryPolicy", "transaction_conflict"]

T = TypeVar("T")


class RetryPolicy(BaseModel):
    """How often to try, and how long to wait before each retry: exponential, capped, with full jitter.

    Attributes:
        attempts: tries at most, the first one counted.
        base_delay_s: the longest wait before the first retry; it doubles with each retry...
        max_delay_s: ...up to this.
    """

    model_config = ConfigDict(frozen=True)

    attempts: int = Field(ge=1)
    base_delay_s: float = Field(ge=0)
    max_delay_s: float = Field(ge=0)

    def delay_s(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (1-based)."""
        return random.uniform(0, min(self.max_delay_s, self.base_delay_s * 2 ** (retry - 1)))

    def call(
        self,
        attempt: Callable[[], T],
        *,
        retry_on: Callable[[Exception], bool],
        sleep: Callable[[float], None] = time.sleep,
    ) -> T:
        """Return ``attempt()``'s result, trying again while it raises an error ``retry_on`` accepts.

        Raises:
            Exception: ``attempt``'s error when ``retry_on`` refuses it, or on the last attempt.
        """
        for retry in range(1, self.attempts):
            try:
                return attempt()
            except Exception as exc:
                if not retry_on(exc):
                    raise
            sleep(self.delay_s(retry))
        return attempt()


#: Every slot change goes through one budget item and every claim through the trainer's items, so concurrent
#: transactions conflict on them; such a transaction is tried again soon (the ledger's, the trainer's claims).
TRANSACTION_CONFLICTS = RetryPolicy(attempts=6, base_delay_s=0.04, max_delay_s=0.4)

#: The error of a DynamoDB transaction that did not commit; ``CancellationReasons`` says why, item by item.
TRANSACTION_CANCELLED = "TransactionCanceledException"
_CONFLICT = "TransactionConflict"
_CONDITION = "ConditionalCheckFailed"


def transaction_conflict(exc: Exception) -> bool:
    """Whether a DynamoDB transaction was cancelled by a concurrent one alone (no condition of its failed)."""
    if error_code(exc) != TRANSACTION_CANCELLED:
        return False
    reasons = error_reasons(exc)
    return _CONFLICT in reasons and _CONDITION not in reasons
