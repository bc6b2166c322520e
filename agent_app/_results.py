"""Storing a rollout's one result object: a conditional put, first writer wins.

Transient S3 errors (503 SlowDown, 500, timeouts, dropped connections) are retried by the S3 client's botocore
(standard mode, :data:`RESULT_WRITE_ATTEMPTS` attempts on the client the app builds). Left here is the one answer
botocore does not retry: ``ConditionalRequestConflict`` (409), a concurrent conditional write to the same key in
flight; the retry then sees ``PreconditionFailed`` or succeeds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from rollout_contract.aws import error_code
from rollout_contract.retry import RetryPolicy

if TYPE_CHECKING:
    from types_boto3_s3 import S3Client


__all__ = ["RESULT_WRITE_ATTEMPTS", "WRITE_CONFLICTS", "ResultWriteError", "ResultWriter"]

logger = logging.getLogger(__name__)

PRECONDITION_FAILED = "PreconditionFailed"
CONDITIONAL_REQUEST_CONFLICT = "ConditionalRequestConflict"
#: botocore's attempts of one put on the S3 client the app builds (a result write is worth some patience).
RESULT_WRITE_ATTEMPTS = 8
#: Tries of a put that races another conditional write to the same key.
WRITE_CONFLICTS = RetryPolicy(attempts=5, base_delay_s=0.1, max_delay_s=2.0)


class ResultWriteError(RuntimeError):
    """The result could not be stored: a final S3 error, or transient errors beyond botocore's retries."""


class ResultWriter:
    """Puts result objects with ``IfNoneMatch="*"``, so an existing object is never replaced."""

    def __init__(
        self,
        s3_client: S3Client,
        *,
        conflicts: RetryPolicy = WRITE_CONFLICTS,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """Write through ``s3_client`` (a boto3 S3 client, which retries transient errors itself)."""
        self.s3_client = s3_client
        self._conflicts = conflicts
        self._sleep = sleep

    def write(self, bucket: str, key: str, body: bytes, metadata: dict[str, str] | None = None) -> bool:
        """Store ``body`` (with user ``metadata``, e.g. its proof) at ``s3://bucket/key`` unless an object is there.

        Returns:
            ``True`` if this call stored the object; ``False`` if another writer got there first.

        Raises:
            ResultWriteError: a final S3 error (no such bucket, access denied, ...), or a transient one that
                outlasted botocore's retries.
        """
        try:
            self._conflicts.call(
                lambda: self.s3_client.put_object(
                    Bucket=bucket,
                    Key=key,
                    Body=body,
                    ContentType="application/json",
                    IfNoneMatch="*",
                    Metadata=metadata or {},
                ),
                retry_on=lambda exc: error_code(exc) == CONDITIONAL_REQUEST_CONFLICT,
                sleep=self._sleep,
            )
            return True
        except ClientError as exc:
            if error_code(exc) == PRECONDITION_FAILED:
                logger.info("s3://%s/%s already holds a result; keeping the first writer's", bucket, key)
                return False
            raise ResultWriteError(f"cannot store s3://{bucket}/{key}: {exc}") from exc
        except BotoCoreError as exc:
            raise ResultWriteError(f"cannot store s3://{bucket}/{key}: {exc}") from exc
