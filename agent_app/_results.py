"""Storing a rollout's one result object: a conditional put, first writer wins, transient errors retried."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError

from rollout_contract.aws import error_code, http_status

__all__ = ["Backoff", "ResultWriteError", "ResultWriter"]

logger = logging.getLogger(__name__)

PRECONDITION_FAILED = "PreconditionFailed"
# S3 codes worth another attempt; any 5xx counts too. ConditionalRequestConflict (409) means a concurrent
# conditional write to the same key is in flight: the retry then sees PreconditionFailed or succeeds.
_TRANSIENT_CODES = frozenset(
    {"SlowDown", "RequestTimeout", "Throttling", "ThrottlingException", "ConditionalRequestConflict"}
)


class ResultWriteError(RuntimeError):
    """The result could not be stored: a final S3 error, or transient errors beyond the retry budget."""


@dataclass(frozen=True)
class Backoff:
    """How often and how patiently to retry a transient S3 error (exponential, full jitter)."""

    attempts: int = 8
    base_delay_s: float = 0.25
    max_delay_s: float = 10.0

    def delay_s(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (1-based)."""
        return random.uniform(0, min(self.max_delay_s, self.base_delay_s * 2 ** (retry - 1)))


DEFAULT_BACKOFF = Backoff()


def _is_transient(exc: ClientError) -> bool:
    return error_code(exc) in _TRANSIENT_CODES or http_status(exc) >= 500


class ResultWriter:
    """Puts result objects with ``IfNoneMatch="*"``, so an existing object is never replaced."""

    def __init__(
        self, s3_client: Any, *, backoff: Backoff = DEFAULT_BACKOFF, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        """Write through ``s3_client`` (a boto3 S3 client), retrying transient errors per ``backoff``."""
        self.s3_client = s3_client
        self._backoff = backoff
        self._sleep = sleep

    def write(self, bucket: str, key: str, body: bytes) -> bool:
        """Store ``body`` at ``s3://bucket/key`` unless an object is already there.

        Returns:
            ``True`` if this call stored the object; ``False`` if another writer got there first.

        Raises:
            ResultWriteError: a final S3 error (no such bucket, access denied, ...), or transient errors
                on every attempt.
        """
        for attempt in range(1, self._backoff.attempts + 1):
            try:
                self.s3_client.put_object(
                    Bucket=bucket, Key=key, Body=body, ContentType="application/json", IfNoneMatch="*"
                )
                return True
            except ClientError as exc:
                if error_code(exc) == PRECONDITION_FAILED:
                    logger.info("s3://%s/%s already holds a result; keeping the first writer's", bucket, key)
                    return False
                if not _is_transient(exc):
                    raise ResultWriteError(f"cannot store s3://{bucket}/{key}: {exc}") from exc
                failure: Exception = exc
            except (BotoConnectionError, HTTPClientError) as exc:
                failure = exc
            if attempt < self._backoff.attempts:
                delay = self._backoff.delay_s(attempt)
                logger.warning(
                    "storing s3://%s/%s failed (attempt %d of %d, retrying in %.2fs): %s",
                    bucket,
                    key,
                    attempt,
                    self._backoff.attempts,
                    delay,
                    failure,
                )
                self._sleep(delay)
        raise ResultWriteError(
            f"cannot store s3://{bucket}/{key}: transient errors on all {self._backoff.attempts} attempts"
        ) from failure
