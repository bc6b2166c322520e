"""The result document: one JSON object per rollout, first writer wins, stored as ART stores it.

The document is ART's: the handler's dict as it returned it, plus ``status_code`` (200) and
``stop_reason`` (``"end_turn"``) when absent, and ``input_id``, ``s3_bucket``, ``result_key`` and
``payload`` (always set); a failure is ``{"status_code": 500, "stop_reason": str(e), "traceback": ...}``
plus the same metadata. What this project adds lives under one key, :data:`META_FIELD`: the typed
status, the ids, timings and a structured error. So a handler's own ``status``, ``error``,
``timings``, ``session_id`` or ``exp_id`` key is stored as it returned it (the collision rule: ART's
metadata keys are overwritten as ART overwrites them; :data:`META_FIELD` is the only key of ours).

:class:`RolloutResult` is that document as a ``dict`` (``json.dumps(result)`` and ``result == {...}``
work as on ART's results) with typed read-only views: :attr:`~RolloutResult.status` is the one rule
that turns ART's fields into a :class:`Status` (:func:`derive_outcome`, also what writers store),
:attr:`~RolloutResult.reward` the one rule for the scalar reward, and a value the typed views cannot
read is named in :attr:`~RolloutResult.field_errors` instead of failing the result.
"""

from __future__ import annotations

import copy
import json
import math
import traceback as traceback_module
from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any, NamedTuple, Self

from pydantic import BaseModel, ConfigDict, ValidationError

from rollout_contract.ids import InvalidIdError
from rollout_contract.keys import ResultKey, parse_result_key

REDACTED = "***redacted***"
ROLLOUT_FIELD = "_rollout"
#: The ``_rollout`` field that carries the session's result-signing key (``rollout_contract.proof``).
PROOF_KEY_FIELD = "proof_key"
#: ``_rollout`` fields that are secrets: redacted wherever a payload is stored.
SECRET_ROLLOUT_FIELDS = frozenset({"api_key", PROOF_KEY_FIELD})
#: The one key of a result document that this project owns (status, ids, timings, error).
META_FIELD = "_agentcore_rollouts"
#: Keys ART sets on every stored result, overwriting the handler's (``status_code`` and ``stop_reason``
#: only when the handler did not set them).
ART_METADATA_FIELDS = ("status_code", "stop_reason", "input_id", "s3_bucket", "result_key", "payload")
#: ART's top-level field holding a failed handler's traceback.
TRACEBACK_FIELD = "traceback"
#: ``ErrorInfo.type`` of a reward that is NaN or infinite.
NON_FINITE_REWARD = "NonFiniteReward"
#: ``ErrorInfo.type`` of a reward that is not a number or a list of numbers (``"very good"``, ``{"a": 1}``).
INVALID_REWARD = "InvalidReward"
#: ``ErrorInfo.type`` of a failure an agent reported without an exception (a ``status_code`` other than 200).
AGENT_REPORTED_FAILURE = "AgentReportedFailure"
_CONTRACT_FIELDS = frozenset({*ART_METADATA_FIELDS, "rewards", TRACEBACK_FIELD, META_FIELD})
#: Fields the typed views read, the type each must have, and how to say it.
_TYPED_FIELDS = (("status_code", int, "an integer"), ("stop_reason", str, "a string"), ("payload", dict, "an object"))


class Status(StrEnum):
    """How a rollout ended. Every rollout ends in exactly one of these."""

    SUCCEEDED = "succeeded"
    AGENT_ERROR = "agent_error"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    DISPATCH_FAILED = "dispatch_failed"


#: ART's ``status_code`` for each status: 200 and 500 are ART's; the others are ours.
STATUS_CODES: Mapping[Status, int] = {
    Status.SUCCEEDED: 200,
    Status.AGENT_ERROR: 500,
    Status.TIMED_OUT: 504,
    Status.CANCELLED: 499,
    Status.DISPATCH_FAILED: 502,
}


_STATUS_VALUES = frozenset(status.value for status in Status)


class InvalidResultError(ValueError):
    """An object at a result key that is not a result document (not a JSON object, or no ids)."""


class ErrorInfo(BaseModel):
    """What went wrong: an exception type (or error code), a message, and a traceback if there is one."""

    model_config = ConfigDict(frozen=True)

    type: str
    message: str
    traceback: str | None = None

    @classmethod
    def from_exception(cls, exc: BaseException) -> ErrorInfo:
        """Describe ``exc`` with its full traceback."""
        return cls(
            type=type(exc).__name__,
            message=str(exc),
            traceback="".join(traceback_module.format_exception(exc)),
        )


class Timings(BaseModel):
    """Unix timestamps (seconds) of a rollout's milestones; ``None`` where the writer did not see one."""

    submitted_at: float | None = None
    dispatched_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None

    @property
    def duration_s(self) -> float | None:
        """Seconds from the agent starting the handler to the result."""
        if self.started_at is None or self.finished_at is None:
            return None
        return self.finished_at - self.started_at

    @property
    def dispatch_delay_s(self) -> float | None:
        """Seconds from submission to the invoke (time spent waiting for budget)."""
        if self.submitted_at is None or self.dispatched_at is None:
            return None
        return self.dispatched_at - self.submitted_at


class RewardReading(NamedTuple):
    """The scalar reward of a document, or why there is none (``error_type``: why it fails the rollout)."""

    reward: float | None
    problem: str | None = None
    error_type: str | None = None


def read_reward(document: Mapping[str, Any]) -> RewardReading:
    """Read a document's scalar reward by ART's rule, finite numbers only.

    ``rewards`` is a number, or a list of numbers whose last element is the reward (an empty list or no
    ``rewards``: no reward; ``None`` before the last element: a turn without one); as in ART, ``float()`` reads
    each (so ``1``, ``True`` and ``"0.5"`` are 1.0, 1.0 and 0.5). Anything else gives no reward and an
    ``error_type``: :data:`INVALID_REWARD` for a value ``float()`` cannot read (``"very good"``, an object, a
    last element ``None``), :data:`NON_FINITE_REWARD` for NaN or an infinite number anywhere in ``rewards``.
    """
    rewards = document.get("rewards")
    if rewards is None or rewards == []:
        return RewardReading(None)
    numbers = rewards if isinstance(rewards, list) else [rewards]
    values = []
    for index, value in enumerate(numbers):
        if value is None and index < len(numbers) - 1:
            continue
        try:
            values.append(float(value))
        except (TypeError, ValueError):
            where = f"rewards[{index}]" if isinstance(rewards, list) else "rewards"
            return RewardReading(
                None,
                f"{where} is {_type_name(value)} ({value!r}); a reward must be a finite number or a list of them",
                INVALID_REWARD,
            )
    if not all(math.isfinite(number) for number in values):
        return RewardReading(
            None, f"rewards={rewards!r} holds NaN or an infinite number; a reward must be finite", NON_FINITE_REWARD
        )
    return RewardReading(values[-1])


def _type_name(value: Any) -> str:
    """A JSON reader's name for ``value``'s type: ``a string``, ``an object``, ``null``, ..."""
    names = {str: "a string", dict: "an object", list: "a list", type(None): "null"}
    return names.get(type(value), f"a {type(value).__name__}")


def derive_outcome(document: Mapping[str, Any]) -> tuple[Status, ErrorInfo | None]:
    """The status of an ART-shaped document (no :data:`META_FIELD`) and, for a failure, its error.

    ART's rule: ``status_code`` absent or 200 is a success, anything else a failure (``agent_error``,
    its message from ``stop_reason``, its type from ART's ``traceback``). A success whose reward is not a
    finite number or a list of them is refused as ``agent_error`` (:data:`NON_FINITE_REWARD`,
    :data:`INVALID_REWARD`, the field and the value's type in the message), where ART would store it as a
    success; the document itself stays as ART stores it.
    """
    status_code = document.get("status_code")
    if status_code is None or status_code == 200:
        reading = read_reward(document)
        if reading.error_type is not None and reading.problem is not None:
            return Status.AGENT_ERROR, ErrorInfo(type=reading.error_type, message=reading.problem)
        return Status.SUCCEEDED, None
    trace = document.get(TRACEBACK_FIELD)
    trace = trace if isinstance(trace, str) else None
    stop_reason = document.get("stop_reason")
    if not isinstance(stop_reason, str):
        stop_reason = f"the agent reported status_code={status_code!r}, stop_reason={stop_reason!r}"
    return Status.AGENT_ERROR, ErrorInfo(type=_exception_type(trace), message=stop_reason, traceback=trace)


def _exception_type(trace: str | None) -> str:
    """The exception class named on a Python traceback's last line (``pkg.mod.KeyError: 'x'`` -> ``KeyError``)."""
    lines = [line for line in (trace or "").splitlines() if line.strip()]
    if lines and not lines[-1].startswith(" "):
        name = lines[-1].partition(":")[0].rpartition(".")[2].strip()
        if name.isidentifier():
            return name
    return AGENT_REPORTED_FAILURE


class RolloutResult(dict[str, Any]):
    """A rollout's terminal result: the stored document, as stored (a ``dict``), with typed views.

    Build one with :meth:`from_handler_output` or :meth:`terminal` (writers) or :meth:`from_json_bytes`
    (readers). The typed views read the document at each access; this project's additions are under
    :data:`META_FIELD`, and a document without them (written by ART's own agent) has its status derived
    from ART's fields by :func:`derive_outcome`.
    """

    #: Who the stored object can be shown to come from (a ``rollout_contract.proof.Provenance``), once a reader
    #: checked it (``rollout_contract.proof``); ``None`` until then. An attribute, not a document key.
    provenance: str | None = None

    @property
    def _meta(self) -> Mapping[str, Any]:
        meta = self.get(META_FIELD)
        return meta if isinstance(meta, Mapping) else {}

    @property
    def _stored_status(self) -> Status | None:
        stored = self._meta.get("status")
        return Status(stored) if stored in _STATUS_VALUES else None

    @property
    def status(self) -> Status:
        """How the rollout ended: as this project's writers stored it, else derived from ART's fields."""
        return self._stored_status or derive_outcome(self)[0]

    @property
    def ok(self) -> bool:
        """Whether the rollout succeeded."""
        return self.status is Status.SUCCEEDED

    @property
    def error(self) -> ErrorInfo | None:
        """What went wrong (``None`` for a success); the traceback is ART's top-level ``traceback``."""
        if self._stored_status is None:
            return derive_outcome(self)[1]
        stored = self._meta.get("error")
        if not isinstance(stored, Mapping):
            return None
        trace = self.get(TRACEBACK_FIELD)
        return ErrorInfo(
            type=str(stored.get("type", AGENT_REPORTED_FAILURE)),
            message=str(stored.get("message", "")),
            traceback=trace if isinstance(trace, str) else None,
        )

    @property
    def status_code(self) -> int | None:
        """ART's ``status_code`` (200 success, 500 agent failure; 504, 499, 502 are ours), if an integer."""
        value = self.get("status_code")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def stop_reason(self) -> str | None:
        """ART's ``stop_reason`` (``"end_turn"``, or the failure's message), if a string."""
        value = self.get("stop_reason")
        return value if isinstance(value, str) else None

    @property
    def rewards(self) -> Any:
        """``rewards`` as stored (a number or a list, by ART's convention); :attr:`reward` reads it."""
        return self.get("rewards")

    @property
    def reward(self) -> float | None:
        """The scalar reward: ``rewards`` if a number, its last element if a list (:func:`read_reward`)."""
        return read_reward(self).reward

    @property
    def key(self) -> ResultKey:
        """The ids this result is stored under: this project's, else parsed from ART's ``result_key``.

        Raises:
            InvalidResultError: the document names no valid ids.
        """
        meta = self._meta
        exp_id, session_id, input_id = meta.get("exp_id"), meta.get("session_id"), self.get("input_id")
        if isinstance(exp_id, str) and isinstance(session_id, str) and isinstance(input_id, str):
            return ResultKey(exp_id, input_id, session_id)
        result_key = self.get("result_key")
        if not isinstance(result_key, str):
            raise InvalidResultError(f"the result document has no {META_FIELD} ids and no result_key string")
        try:
            return parse_result_key(result_key)
        except InvalidIdError as exc:
            raise InvalidResultError(f"the result document's result_key names no valid ids: {exc}") from exc

    @property
    def exp_id(self) -> str:
        """The experiment id."""
        return self.key.exp_id

    @property
    def input_id(self) -> str:
        """The group (prompt) id."""
        return self.key.input_id

    @property
    def session_id(self) -> str:
        """The rollout (session) id."""
        return self.key.session_id

    @property
    def result_key(self) -> str:
        """The S3 key of this result."""
        return str(self.key)

    @property
    def s3_bucket(self) -> str | None:
        """The results bucket."""
        value = self.get("s3_bucket")
        return value if isinstance(value, str) else None

    @property
    def payload(self) -> dict[str, Any] | None:
        """The request payload stored with the result (redacted), if any."""
        value = self.get("payload")
        return value if isinstance(value, dict) else None

    @property
    def timings(self) -> Timings:
        """The rollout's milestones (empty for results written by ART's agent)."""
        try:
            return Timings.model_validate(self._meta.get("timings") or {})
        except ValidationError:
            return Timings()

    @property
    def user_fields(self) -> dict[str, Any]:
        """What the handler returned beyond ART's metadata, ``rewards`` and this project's field."""
        return {name: value for name, value in self.items() if name not in _CONTRACT_FIELDS}

    @property
    def field_errors(self) -> dict[str, str]:
        """Document fields the typed views cannot read, each with what is wrong (empty when all read)."""
        stored = self._meta.get("field_errors")
        errors = {str(name): str(problem) for name, problem in stored.items()} if isinstance(stored, Mapping) else {}
        for name, kind, what in _TYPED_FIELDS:
            value = self.get(name)
            if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
                errors[name] = f"{name}={value!r} is not {what}"
        if (problem := read_reward(self).problem) is not None:
            errors["rewards"] = problem
        meta = self.get(META_FIELD)
        if meta is not None and not isinstance(meta, Mapping):
            errors[META_FIELD] = f"{META_FIELD}={meta!r} is not an object"
        elif meta is not None:
            if meta.get("status") not in _STATUS_VALUES:
                errors[f"{META_FIELD}.status"] = f"status={meta.get('status')!r} is not one of {sorted(_STATUS_VALUES)}"
            try:
                Timings.model_validate(meta.get("timings") or {})
            except ValidationError as exc:
                errors[f"{META_FIELD}.timings"] = (
                    f"timings={meta.get('timings')!r} cannot be read: {exc.errors()[0]['msg']}"
                )
        return errors

    @classmethod
    def terminal(
        cls,
        status: Status,
        *,
        key: ResultKey,
        s3_bucket: str,
        error: ErrorInfo | None = None,
        stop_reason: str | None = None,
        payload: Mapping[str, Any] | None = None,
        timings: Timings | None = None,
    ) -> Self:
        """Build a result that is not a handler's output (error, timeout, cancel, dispatch failure).

        Shaped as ART's failure document: ``status_code``, ``stop_reason`` (the error's message) and
        the error's traceback as ART's top-level ``traceback``.
        """
        document: dict[str, Any] = {
            "status_code": STATUS_CODES[status],
            "stop_reason": stop_reason or (error.message if error else status.value),
        }
        if error is not None and error.traceback is not None:
            document[TRACEBACK_FIELD] = error.traceback
        return cls._with_metadata(
            document, status, error, key=key, s3_bucket=s3_bucket, payload=payload, timings=timings
        )

    @classmethod
    def from_handler_output(
        cls,
        output: Mapping[str, Any],
        *,
        key: ResultKey,
        s3_bucket: str,
        payload: Mapping[str, Any] | None,
        timings: Timings,
    ) -> Self:
        """Build the result of a handler's dict as ART's ``save_result`` stores it, its status by ART's fields.

        The dict is kept as returned (not converted, not copied deeper than its top level): the handler's
        ``status_code`` and ``stop_reason`` when present, else 200 and ``"end_turn"``; ART's metadata keys
        overwritten; a handler's :data:`META_FIELD` replaced and named in :attr:`field_errors`.
        """
        document: dict[str, Any] = {"status_code": STATUS_CODES[Status.SUCCEEDED], "stop_reason": "end_turn"}
        document.update(output)
        field_errors = {}
        if META_FIELD in output:
            field_errors[META_FIELD] = (
                f"{META_FIELD} is reserved for the rollout's metadata; the handler's value is not stored"
            )
            del document[META_FIELD]
        status, error = derive_outcome(document)
        return cls._with_metadata(
            document,
            status,
            error,
            key=key,
            s3_bucket=s3_bucket,
            payload=payload,
            timings=timings,
            field_errors=field_errors,
        )

    @classmethod
    def _with_metadata(
        cls,
        document: dict[str, Any],
        status: Status,
        error: ErrorInfo | None,
        *,
        key: ResultKey,
        s3_bucket: str,
        payload: Mapping[str, Any] | None,
        timings: Timings | None,
        field_errors: Mapping[str, str] | None = None,
    ) -> Self:
        document.update(input_id=key.input_id, s3_bucket=s3_bucket, result_key=str(key))
        if payload is not None:
            document["payload"] = dict(payload)
        meta: dict[str, Any] = {"status": status.value, "exp_id": key.exp_id, "session_id": key.session_id}
        meta["timings"] = (timings or Timings()).model_dump(exclude_none=True)
        if error is not None:
            meta["error"] = error.model_dump(include={"type", "message"})
        if field_errors:
            meta["field_errors"] = dict(field_errors)
        document[META_FIELD] = meta
        return cls(document)

    def to_json_bytes(self) -> bytes:
        """Serialize for S3 as ART does (``json.dumps``: NaN stays ``NaN``).

        Raises:
            TypeError: a value JSON cannot hold (ART's ``save_result`` fails the same way).
            ValueError: a circular reference.
        """
        return json.dumps(self).encode()

    @classmethod
    def from_json_bytes(cls, data: bytes | str) -> Self:
        """Parse a stored result object: any JSON object naming its ids (this project's or ART's).

        Raises:
            InvalidResultError: not JSON, not an object, or no ids.
        """
        try:
            document = json.loads(data)
        except ValueError as exc:
            raise InvalidResultError(f"the result object is not JSON: {exc}") from exc
        if not isinstance(document, dict):
            raise InvalidResultError(f"the result object is a JSON {type(document).__name__}, not an object")
        result = cls(document)
        _ = result.key  # a document without ids is refused now, not at its first use
        return result


def redact_payload(payload: Mapping[str, Any], extra_keys: Iterable[str] = ()) -> dict[str, Any]:
    """Return a deep copy of ``payload`` with secrets replaced by :data:`REDACTED`.

    ``_rollout.api_key`` is always redacted; ``extra_keys`` names more keys, redacted at any depth.
    """
    redacted = copy.deepcopy(dict(payload))
    names = frozenset(extra_keys)

    def scrub(node: Any) -> None:
        if isinstance(node, dict):
            for name in node:
                if name in names:
                    node[name] = REDACTED
                else:
                    scrub(node[name])
        elif isinstance(node, list):
            for item in node:
                scrub(item)

    scrub(redacted)
    rollout = redacted.get(ROLLOUT_FIELD)
    if isinstance(rollout, dict):
        for name in SECRET_ROLLOUT_FIELDS & rollout.keys():
            rollout[name] = REDACTED
    return redacted
