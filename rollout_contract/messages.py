"""Message shapes: the ``_rollout`` block of an agent payload and the dispatch-queue messages."""

from __future__ import annotations

import math
import time
from numbers import Real
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator

from rollout_contract.ids import split_exp_id, validate_exp_id, validate_input_id, validate_rollout_session_id
from rollout_contract.keys import ResultKey
from rollout_contract.results import ROLLOUT_FIELD

#: SQS accepts 256 KiB per message (moto too); larger payloads travel by S3 reference.
SQS_MAX_INLINE_PAYLOAD_BYTES = 240 * 1024
SAVE_FIELDS = ("exp_id", "input_id", "s3_bucket")
#: Seconds a rollout may wait for capacity (a session slot, an invoke slot) before it starts; its
#: ``timeout_s`` runs from the start, not from the submit.
DEFAULT_QUEUE_TIMEOUT_S = 3600.0
#: The ``status`` of an agent's immediate answer to ``/invocations`` (ART's).
PROCESSING = "processing"


def validate_timeout_s(value: object, name: str = "timeout") -> float:
    """Return ``value`` as seconds if it is a finite positive number (not a bool, not a string).

    Raises:
        ValueError: anything else; the message names ``name`` and says what to pass.
    """
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ValueError(f"{name} must be a number of seconds, got {type(value).__name__} {value!r}")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{name} must be a finite positive number of seconds, got {value!r}")
    return seconds


class MissingRolloutFieldsError(ValueError):
    """``_rollout`` names some but not all of ``exp_id``, ``input_id`` and ``s3_bucket``."""


class RolloutSpec(BaseModel):
    """The ``_rollout`` block injected into an agent's payload.

    ``exp_id``, ``input_id`` and ``s3_bucket`` say where the result goes (all or none of them);
    ``base_url``, ``model_id``, ``sampling_params`` and ``api_key`` are conventions user code reads;
    ``submitted_at`` and ``dispatched_at`` (unix seconds), when a dispatcher sets them, go into the
    result's timings. Other fields pass through untouched.
    """

    model_config = ConfigDict(extra="allow")

    exp_id: str | None = None
    input_id: str | None = None
    s3_bucket: str | None = None
    base_url: str | None = None
    model_id: str | None = None
    sampling_params: dict[str, Any] | None = None
    api_key: str | None = None
    submitted_at: float | None = None
    dispatched_at: float | None = None

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> RolloutSpec:
        """Read the ``_rollout`` block of ``payload`` (empty when absent)."""
        block = payload.get(ROLLOUT_FIELD)
        if block is None:
            return cls()
        if not isinstance(block, dict):
            raise MissingRolloutFieldsError(f"{ROLLOUT_FIELD} must be an object, got {type(block).__name__}")
        return cls.model_validate(block)

    def save_target(self) -> tuple[str, str, str] | None:
        """Return ``(exp_id, input_id, s3_bucket)``, or ``None`` when the result is not to be saved.

        Raises:
            MissingRolloutFieldsError: only some of the three fields are set.
        """
        values = {name: getattr(self, name) for name in SAVE_FIELDS}
        missing = [name for name, value in values.items() if not value]
        if len(missing) == len(SAVE_FIELDS):
            return None
        if missing:
            raise MissingRolloutFieldsError(
                f"Missing required rollout config field(s) in {ROLLOUT_FIELD}: missing {', '.join(missing)}. Give all "
                "of exp_id, input_id and s3_bucket to save the result, or none of them to run without saving"
            )
        return validate_exp_id(values["exp_id"]), validate_input_id(values["input_id"]), values["s3_bucket"]


def processing_response(s3_bucket: str | None = None, result_key: str | None = None) -> dict[str, str]:
    """Return the agent's immediate answer to ``/invocations``: ``{"status": "processing", ...}``.

    ``s3_bucket`` and ``result_key`` are present when the rollout saves its result.
    """
    response = {"status": PROCESSING}
    if s3_bucket is not None and result_key is not None:
        response.update(s3_bucket=s3_bucket, result_key=result_key)
    return response


class _QueueMessage(BaseModel):
    model_config = ConfigDict(frozen=True)

    exp_id: str
    input_id: str
    session_id: str
    #: The trainer that sent it (``sessions.ATTR_TRAINER``); ``None`` from trainers older than ownership.
    trainer: str | None = None

    @field_validator("exp_id")
    @classmethod
    def _check_exp_id(cls, value: str) -> str:
        split_exp_id(value)
        return value

    @field_validator("input_id")
    @classmethod
    def _check_input_id(cls, value: str) -> str:
        return validate_input_id(value)

    @field_validator("session_id")
    @classmethod
    def _check_session_id(cls, value: str) -> str:
        return validate_rollout_session_id(value)

    @property
    def key(self) -> ResultKey:
        """The ids of the rollout this message is about."""
        return ResultKey(self.exp_id, self.input_id, self.session_id)

    def to_body(self) -> str:
        """Serialize as an SQS message body."""
        return self.model_dump_json(exclude_none=True)


class DispatchRequest(_QueueMessage):
    """Start one rollout: what the trainer puts on the dispatch queue.

    Exactly one of ``payload`` (inline) and ``payload_ref`` (key of the payload in the results bucket)
    is set. ``rollout`` holds the ``_rollout`` fields beyond the save target (``base_url``, ``model_id``,
    ``sampling_params``, ...). Two limits: the rollout must start (be invoked) by ``start_by`` =
    ``submitted_at + queue_timeout_s``, or it ends as ``dispatch_failed`` (``QueueWaitExceeded``); once
    started, it may run ``timeout_s``, after which the sweeper ends it as ``timed_out``. Waiting for
    capacity does not spend ``timeout_s``.
    """

    kind: Literal["start"] = "start"
    payload: dict[str, Any] | None = None
    payload_ref: str | None = None
    rollout: dict[str, Any] = Field(default_factory=dict)
    submitted_at: float = Field(default_factory=time.time)
    timeout_s: float = Field(gt=0, allow_inf_nan=False)
    queue_timeout_s: float = Field(default=DEFAULT_QUEUE_TIMEOUT_S, gt=0, allow_inf_nan=False)

    @property
    def start_by(self) -> float:
        """Unix time after which a rollout that has not started ends as ``dispatch_failed``."""
        return self.submitted_at + self.queue_timeout_s

    @property
    def deadline_at(self) -> float:
        """Unix time by which the rollout has ended at the latest (started at ``start_by``, ran ``timeout_s``)."""
        return self.start_by + self.timeout_s

    def run_deadline(self, started_at: float) -> float:
        """Unix time after which the sweeper ends the rollout, when it started at ``started_at``."""
        return started_at + self.timeout_s

    def invoke_payload(self, payload: dict[str, Any], s3_bucket: str) -> dict[str, Any]:
        """Return the agent payload: ``payload`` with ``_rollout`` holding the save target and model fields."""
        rollout = dict(payload.get(ROLLOUT_FIELD) or {})
        rollout.update(self.rollout)
        rollout.update(exp_id=self.exp_id, input_id=self.input_id, s3_bucket=s3_bucket)
        return {**payload, ROLLOUT_FIELD: rollout}


class CancelRequest(_QueueMessage):
    """End one rollout as ``cancelled`` and stop its session (under the shared invoke budget)."""

    kind: Literal["cancel"] = "cancel"
    requested_at: float = Field(default_factory=time.time)


DispatchMessage = Annotated[DispatchRequest | CancelRequest, Field(discriminator="kind")]
_DISPATCH_MESSAGE = TypeAdapter(DispatchMessage)


def parse_dispatch_message(body: str | bytes) -> DispatchRequest | CancelRequest:
    """Parse a dispatch-queue message body (raises ``pydantic.ValidationError`` when malformed)."""
    return _DISPATCH_MESSAGE.validate_json(body)
