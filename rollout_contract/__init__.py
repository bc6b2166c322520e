"""The rollout contract: the one module every component imports.

- ``ids``: experiment, run, exp_id (``experiment`` or ``experiment/run``), input and session id rules.
- ``keys``: the result key layout ``{exp_id}/{input_id}/{session_id}.json`` and its parser (from the right).
- ``results``: :class:`RolloutResult` (the stored document as a dict, ART's or ours, with typed views),
  :class:`Status`, :func:`derive_outcome` (ART's fields -> status), :class:`ErrorInfo`, :class:`Timings`, redaction.
- ``messages``: the ``_rollout`` block (:class:`RolloutSpec`) and dispatch-queue messages.
- ``events``: S3 "Object Created" EventBridge events, AWS's and moto's shapes.
- ``protocol``: AgentCore Runtime headers, ping states, error codes, quotas.
- ``resources``: resource names and shapes shared by the CDK app and the local stack.
- ``naming``: how each AWS name is built from an experiment id, its limit, and the longest id they allow.
- ``sessions``: the sessions-table item (attribute names, :class:`SessionState`).
- ``lifecycle``: the table of a rollout's moves between states (who, when, condition, slot, result).
- ``monitoring``: the experiment's dashboard widgets and alarms as data (the CDK app and ``rollouts dashboard``).
- ``sandbox``: ART's sandbox protocol and the rules for sandbox sessions (their reserved id prefix, lifetimes).
- ``aws``: the one factory of boto3 clients (:class:`~rollout_contract.aws.ClientFactory`) and AWS error codes.

Pure: no boto3, no I/O, nothing read from the environment at import (``aws`` imports boto3 when it builds).
"""

from rollout_contract.events import NotAnObjectCreatedEventError, ObjectCreated, parse_object_created
from rollout_contract.ids import (
    InvalidIdError,
    join_exp_id,
    new_session_id,
    split_exp_id,
    validate_exp_id,
    validate_experiment,
    validate_input_id,
    validate_rollout_session_id,
    validate_run,
    validate_session_id,
    validate_session_key_segment,
)
from rollout_contract.keys import (
    ResultKey,
    experiment_prefix,
    is_result_key,
    parse_result_key,
    payload_ref_key,
    result_key,
)
from rollout_contract.messages import (
    CancelRequest,
    DispatchRequest,
    MissingRolloutFieldsError,
    RolloutSpec,
    parse_dispatch_message,
    validate_timeout_s,
)
from rollout_contract.resources import ExperimentDescriptor, ExperimentResources, HandlerSettings
from rollout_contract.results import (
    META_FIELD,
    REDACTED,
    ROLLOUT_FIELD,
    STATUS_CODES,
    ErrorInfo,
    InvalidResultError,
    RolloutResult,
    Status,
    Timings,
    derive_outcome,
    read_reward,
    redact_payload,
)

__all__ = [
    "CancelRequest",
    "DispatchRequest",
    "ErrorInfo",
    "ExperimentDescriptor",
    "ExperimentResources",
    "HandlerSettings",
    "InvalidIdError",
    "InvalidResultError",
    "META_FIELD",
    "MissingRolloutFieldsError",
    "NotAnObjectCreatedEventError",
    "ObjectCreated",
    "REDACTED",
    "ROLLOUT_FIELD",
    "ResultKey",
    "RolloutResult",
    "RolloutSpec",
    "STATUS_CODES",
    "Status",
    "Timings",
    "derive_outcome",
    "experiment_prefix",
    "is_result_key",
    "join_exp_id",
    "new_session_id",
    "parse_dispatch_message",
    "parse_object_created",
    "parse_result_key",
    "payload_ref_key",
    "read_reward",
    "redact_payload",
    "result_key",
    "split_exp_id",
    "validate_exp_id",
    "validate_experiment",
    "validate_input_id",
    "validate_rollout_session_id",
    "validate_run",
    "validate_session_id",
    "validate_session_key_segment",
    "validate_timeout_s",
]
