"""Reading a result that may not be stored yet, under S3's rule for missing keys.

S3 answers a GetObject of a missing key with 404 only to a caller holding ``s3:ListBucket`` for that request;
everyone else gets 403 ``AccessDenied``, so that keys cannot be probed. The trainer role's ``ListBucket`` is
conditioned on ``s3:prefix`` (the experiment's results only), which a GetObject request does not carry: for
the trainer, a result not written yet is a 403. A 403 is therefore settled by listing the key itself
(ListObjectsV2 with the key as prefix, which that grant allows): not listed means not stored.
"""

from __future__ import annotations

import functools
import time
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from rollout_contract.aws import error_code
from rollout_contract.keys import parse_result_key
from rollout_contract.proof import Provenance, ResultProof, UnprovenResults, accepted, refused
from trainer_client._results import ClientResult

if TYPE_CHECKING:
    from types_boto3_s3 import S3Client

__all__ = ["ResultReader", "is_stored", "read_if_stored"]

_MISSING = frozenset({"NoSuchKey", "404", "NotFound"})
_DENIED = frozenset({"AccessDenied", "403"})
#: The pause before an unproven result is read again (see ``ResultReader._parse``).
_UNPROVEN_REREAD_S = 0.2


class ResultReader:
    """Reads an experiment's result objects and accepts only what its proof allows (D100).

    Each result is checked against the experiment key (read from Secrets Manager on the first read): a forged one,
    and an unproven one unless ``unproven`` is :attr:`UnprovenResults.ACCEPT`, is read as an ``agent_error`` saying
    the result was not written by the rollout's agent (``rollout_contract.proof.refused``), whatever it holds.
    """

    def __init__(
        self,
        s3: S3Client,
        secretsmanager: Any,
        bucket: str,
        experiment: str,
        unproven: UnprovenResults = UnprovenResults.REJECT,
    ) -> None:
        """Read from ``bucket`` with ``s3``; the experiment key of ``experiment`` with ``secretsmanager``."""
        self.s3 = s3
        self.bucket = bucket
        self.unproven = UnprovenResults(unproven)
        self._proof = functools.cache(lambda: ResultProof.from_secret(secretsmanager, experiment))

    def read(self, key: str) -> ClientResult:
        """The result at ``key``, as its proof allows (raises botocore's ``NoSuchKey`` or 403 when none is stored).

        Raises:
            rollout_contract.credentials.SecretReadError: the experiment key cannot be read.
        """
        return self._parse(key, self.s3.get_object(Bucket=self.bucket, Key=key))

    def read_if_stored(self, key: str) -> ClientResult | None:
        """The result at ``key``, as its proof allows, or ``None`` when none is stored (S3's 403 rule included)."""
        stored = read_if_stored(self.s3, self.bucket, key)
        return self._parse(key, stored) if stored is not None else None

    def _parse(self, key: str, stored: Any) -> ClientResult:
        # Checked against the session of the key it is stored at: a result signed for one session and copied to
        # another's key does not prove anything there.
        stored_at = parse_result_key(key)
        body = bytes(stored["Body"].read())
        provenance = self._proof().check(stored_at.session_id, body, stored.get("Metadata"))
        if provenance is Provenance.UNPROVEN and not accepted(provenance, self.unproven):
            # Read once more before refusing: moto (the local stack's S3) shows a new object, and sends its event,
            # before it sets the object's metadata, where the proof is; S3's PUT stores both at once.
            time.sleep(_UNPROVEN_REREAD_S)
            again = self.s3.get_object(Bucket=self.bucket, Key=key)
            body = bytes(again["Body"].read())
            provenance = self._proof().check(stored_at.session_id, body, again.get("Metadata"))
        if not accepted(provenance, self.unproven):
            return refused(ClientResult, provenance, stored_at, self.bucket)
        result = ClientResult.from_json_bytes(body)
        result.provenance = provenance
        return result


def read_if_stored(s3: S3Client, bucket: str, key: str) -> Any | None:
    """The GetObject answer (``Body``, ``Metadata``, ...), or ``None`` when no object is stored at ``key``.

    Raises:
        botocore.exceptions.ClientError: the read failed otherwise (a 403 for a key that exists is a real denial).
    """
    try:
        return s3.get_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        code = error_code(exc)
        if code in _MISSING or (code in _DENIED and not is_stored(s3, bucket, key)):
            return None
        raise


def is_stored(s3: S3Client, bucket: str, key: str) -> bool:
    """Whether an object is stored at ``key``: one ListObjectsV2 of the key itself (no 403/404 ambiguity)."""
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=key, MaxKeys=1).get("Contents", [])
    return any(entry["Key"] == key for entry in listed)
