"""Terminal results in the results bucket: written first-writer-wins, read back by the finisher."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from rollout_budgets.conditional import PRECONDITION_FAILED, conditional_write
from rollout_contract.proof import Provenance, refused
from rollout_contract.results import InvalidResultError, RolloutResult

if TYPE_CHECKING:
    from types_boto3_s3 import S3Client

    from rollout_contract.keys import ResultKey
    from rollout_contract.proof import ResultProof


class Stored(NamedTuple):
    """The result that is stored for a rollout, and whether this writer put it there."""

    result: RolloutResult
    written: bool


class ResultStore:
    """The experiment's result objects and parked payloads in one bucket; results written signed (D100)."""

    def __init__(self, s3: S3Client, *, bucket: str, proof: Callable[[], ResultProof]) -> None:
        """``proof`` gives the experiment key's proof (read from Secrets Manager on the first write)."""
        self._s3 = s3
        self.bucket = bucket
        self._proof = proof

    def write_first(self, result: RolloutResult) -> Stored:
        """Write ``result``, signed, unless a result exists already (first writer wins); return what is stored."""
        body = result.to_json_bytes()
        written = conditional_write(
            self._s3.put_object,
            failed=PRECONDITION_FAILED,
            Bucket=self.bucket,
            Key=result.result_key,
            Body=body,
            ContentType="application/json",
            IfNoneMatch="*",
            Metadata=self._proof().metadata(result.session_id, body),
        )
        return Stored(result, written=True) if written.ok else Stored(self.read(result.key), written=False)

    def session_key(self, session_id: str) -> str:
        """The key ``session_id``'s agent signs its result with (``_rollout.proof_key``)."""
        return self._proof().session_key(session_id)

    def read(self, key: ResultKey) -> RolloutResult:
        """Read a stored result (raises botocore's ``NoSuchKey`` when there is none).

        An object that is no result document at all (no ids: not written by the agent or a function, D100) reads as
        the ``agent_error`` the trainer sees for it, so the rollout still ends (its session stopped, its slot freed).
        """
        body = self._s3.get_object(Bucket=self.bucket, Key=str(key))["Body"]
        with body:
            try:
                return RolloutResult.from_json_bytes(body.read())
            except InvalidResultError:
                return refused(RolloutResult, Provenance.UNPROVEN, key, self.bucket)

    def exists(self, key: ResultKey | str) -> bool:
        """Whether an object is stored at ``key``: a list of the key itself.

        Not a HEAD: S3 answers a read of a missing key with 404 only to a caller that may list the whole
        bucket; the functions may list only their experiment's prefixes, and get 403.
        """
        listed = self._s3.list_objects_v2(Bucket=self.bucket, Prefix=str(key), MaxKeys=1).get("Contents", [])
        return any(entry["Key"] == str(key) for entry in listed)

    def read_payload(self, payload_key: str) -> dict[str, Any]:
        """Read a payload parked by the trainer at ``payload_key`` (a JSON object).

        Raises:
            ValueError: the object is not a JSON object.
        """
        body = self._s3.get_object(Bucket=self.bucket, Key=payload_key)["Body"]
        with body:
            payload = json.loads(body.read())
        if not isinstance(payload, dict):
            raise ValueError(f"payload at s3://{self.bucket}/{payload_key} must be a JSON object")
        return payload
