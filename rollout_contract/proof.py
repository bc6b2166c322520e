"""Proof that a stored result came from its rollout's agent (D100): the one contract of result provenance.

Each experiment has one secret key, the *experiment key*, created at deploy time in Secrets Manager
(``rollout_contract.credentials.ExperimentSecret.RESULT_KEY``); the dispatcher, the sweeper and the trainer may read
it, the agent's runtime role may not. For each session the dispatcher derives a *session key* from it
(:meth:`ResultProof.session_key`) and hands it to the agent inside the invoke payload (``_rollout.proof_key``).
``agent_app`` takes it out of the payload before the handler sees it, keeps it in the process's memory only, and
signs the result it stores: an HMAC-SHA256 over the session id and the document's exact bytes, stored as the
object's user metadata :data:`PROOF_METADATA` (``x-amz-meta-rollout-proof``), never in the document. The functions
sign their own results (``timed_out``, ``dispatch_failed``, ``cancelled``) with the same derivation. A reader
derives the session key again and checks (:meth:`ResultProof.check`): a result is :attr:`Provenance.PROVEN`,
:attr:`~Provenance.UNPROVEN` (no proof: ART's own agent, or a writer that does not sign) or
:attr:`~Provenance.FORGED` (a proof that does not match). :func:`refused` is what a reader sees of a result it may
not take (:func:`accepted`): an ``agent_error`` naming it (:data:`RESULT_NOT_FROM_AGENT`).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from enum import StrEnum
from typing import Any, TypeVar

from rollout_contract.credentials import ExperimentSecret, read_secret
from rollout_contract.keys import ResultKey
from rollout_contract.results import PROOF_KEY_FIELD, ErrorInfo, RolloutResult, Status

__all__ = [
    "PROOF_KEY_FIELD",
    "PROOF_METADATA",
    "RESULT_NOT_FROM_AGENT",
    "Provenance",
    "ResultProof",
    "UnprovenResults",
    "accepted",
    "refused",
    "sign",
]

#: The result object's user metadata key holding the proof (S3 sends it as ``x-amz-meta-rollout-proof``).
PROOF_METADATA = "rollout-proof"
#: ``ErrorInfo.type`` of a result a reader refused: not written by the rollout's agent (nor by the functions).
RESULT_NOT_FROM_AGENT = "ResultNotFromAgent"
_SESSION_CONTEXT = b"agentcore-rollouts session key\x00"


class Provenance(StrEnum):
    """Who a stored result can be shown to come from."""

    #: Signed with the session's key: the rollout's agent, or the experiment's functions.
    PROVEN = "proven"
    #: No proof at all: ART's own agent (which cannot sign), or any other writer.
    UNPROVEN = "unproven"
    #: A proof that does not match the session and the document: a forgery, or a document changed after signing.
    FORGED = "forged"


class UnprovenResults(StrEnum):
    """What a reader does with an :attr:`Provenance.UNPROVEN` result (a forged one is always refused)."""

    #: Refuse it (the default): anything holding the runtime role's credentials can write an unsigned result.
    REJECT = "reject"
    #: Accept it, marked unproven: for ART's own agents, which write no proof.
    ACCEPT = "accept"


def sign(session_key: str, session_id: str, body: bytes) -> str:
    """The proof of ``body`` stored for ``session_id``: HMAC-SHA256 over the session id, a NUL and the bytes."""
    return hmac.new(session_key.encode(), session_id.encode() + b"\x00" + body, hashlib.sha256).hexdigest()


class ResultProof:
    """The experiment key, and what the functions and the trainer do with it."""

    def __init__(self, experiment_key: str) -> None:
        """Hold ``experiment_key`` (the secret's string)."""
        if not experiment_key:
            raise ValueError("the experiment key is empty; the secret must hold a random string")
        self._key = experiment_key.encode()

    @classmethod
    def from_secret(cls, client: Any, experiment: str) -> ResultProof:
        """Read ``experiment``'s key (:attr:`ExperimentSecret.RESULT_KEY`) from Secrets Manager.

        Raises:
            rollout_contract.credentials.SecretReadError: the secret cannot be read.
        """
        return cls(read_secret(client, experiment, ExperimentSecret.RESULT_KEY))

    def session_key(self, session_id: str) -> str:
        """The key handed to ``session_id``'s agent (``_rollout.proof_key``)."""
        return hmac.new(self._key, _SESSION_CONTEXT + session_id.encode(), hashlib.sha256).hexdigest()

    def metadata(self, session_id: str, body: bytes) -> dict[str, str]:
        """The user metadata to store ``body`` with as ``session_id``'s result."""
        return {PROOF_METADATA: sign(self.session_key(session_id), session_id, body)}

    def check(self, session_id: str, body: bytes, metadata: Mapping[str, str] | None) -> Provenance:
        """Whether ``body``, stored with ``metadata`` at ``session_id``'s key, is signed with the session's key."""
        proof = (metadata or {}).get(PROOF_METADATA)
        if not proof:
            return Provenance.UNPROVEN
        expected = sign(self.session_key(session_id), session_id, body)
        return Provenance.PROVEN if hmac.compare_digest(proof, expected) else Provenance.FORGED


R = TypeVar("R", bound=RolloutResult)


def accepted(provenance: Provenance, unproven: UnprovenResults = UnprovenResults.REJECT) -> bool:
    """Whether a reader takes a result of ``provenance``: a proven one always, an unproven one under
    :attr:`UnprovenResults.ACCEPT`, a forged one never."""
    return provenance is Provenance.PROVEN or (provenance is Provenance.UNPROVEN and unproven is UnprovenResults.ACCEPT)


def refused(cls: type[R], provenance: Provenance, stored_at: ResultKey, s3_bucket: str) -> R:
    """What a reader sees of a result it does not take (stored at ``s3_bucket``/``stored_at``): ``stored_at``'s
    rollout ended ``agent_error``, error :data:`RESULT_NOT_FROM_AGENT`, no reward, whatever the stored object says (it
    is left as it is, and need not be a result document at all); :attr:`RolloutResult.provenance` says what it was."""
    what = "no proof" if provenance is Provenance.UNPROVEN else "a proof that does not match its session and bytes"
    message = (
        f"result not written by the rollout's agent: s3://{s3_bucket}/{stored_at} carries {what} "
        f"(object metadata {PROOF_METADATA!r}), so its reward is not used. Whatever stored it could write to the "
        "results bucket: check which principal put it (CloudTrail S3 data events), that model-written code cannot "
        "reach the runtime role's credentials, and that the agent runs agent_app (ART's own agent signs nothing: "
        "accept its results with unproven_results='accept')"
    )
    result = cls.terminal(
        Status.AGENT_ERROR,
        key=stored_at,
        s3_bucket=s3_bucket,
        error=ErrorInfo(type=RESULT_NOT_FROM_AGENT, message=message),
    )
    result.provenance = provenance
    return result
