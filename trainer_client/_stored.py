"""Reading a result that may not be stored yet, under S3's rule for missing keys.

S3 answers a GetObject of a missing key with 404 only to a caller holding ``s3:ListBucket`` for that request;
everyone else gets 403 ``AccessDenied``, so that keys cannot be probed. The trainer role's ``ListBucket`` is
conditioned on ``s3:prefix`` (the experiment's results only), which a GetObject request does not carry: for
the trainer, a result not written yet is a 403. A 403 is therefore settled by listing the key itself
(ListObjectsV2 with the key as prefix, which that grant allows): not listed means not stored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from rollout_contract.aws import error_code

if TYPE_CHECKING:
    from types_boto3_s3 import S3Client

__all__ = ["is_stored", "read_if_stored"]

_MISSING = frozenset({"NoSuchKey", "404", "NotFound"})
_DENIED = frozenset({"AccessDenied", "403"})


def read_if_stored(s3: S3Client, bucket: str, key: str) -> bytes | None:
    """The object's bytes, or ``None`` when no object is stored at ``key``.

    Raises:
        botocore.exceptions.ClientError: the read failed otherwise (a 403 for a key that exists is a real denial).
    """
    try:
        return bytes(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    except ClientError as exc:
        code = error_code(exc)
        if code in _MISSING or (code in _DENIED and not is_stored(s3, bucket, key)):
            return None
        raise


def is_stored(s3: S3Client, bucket: str, key: str) -> bool:
    """Whether an object is stored at ``key``: one ListObjectsV2 of the key itself (no 403/404 ambiguity)."""
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=key, MaxKeys=1).get("Contents", [])
    return any(entry["Key"] == key for entry in listed)
