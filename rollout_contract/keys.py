"""The result-object key layout, ART's: ``{exp_id}/{input_id}/{session_id}.json``."""

from __future__ import annotations

from typing import NamedTuple

from rollout_contract.ids import InvalidIdError, validate_exp_id, validate_input_id, validate_session_id

RESULT_SUFFIX = ".json"
PAYLOAD_REF_PREFIX = "_payloads"


class ResultKey(NamedTuple):
    """The three ids a result key is made of."""

    exp_id: str
    input_id: str
    session_id: str

    def __str__(self) -> str:
        return f"{self.exp_id}/{self.input_id}/{self.session_id}{RESULT_SUFFIX}"


def result_key(exp_id: str, input_id: str, session_id: str) -> str:
    """Return the S3 key of a rollout's result object, validating every id."""
    return str(ResultKey(validate_exp_id(exp_id), validate_input_id(input_id), validate_session_id(session_id)))


def experiment_prefix(exp_id: str) -> str:
    """Return the key prefix under which all of an experiment's objects live (``exp_id/``)."""
    return f"{validate_exp_id(exp_id)}/"


def payload_ref_prefix(exp_id: str) -> str:
    """Return the key prefix under which an experiment's oversized payloads are parked (``_payloads/exp_id/``)."""
    return f"{PAYLOAD_REF_PREFIX}/{validate_exp_id(exp_id)}/"


def payload_ref_key(exp_id: str, session_id: str) -> str:
    """Return the key where a payload too large for SQS is parked.

    It lies outside the experiment's prefix, so parking a payload never fires the result rule.
    """
    return f"{payload_ref_prefix(exp_id)}{validate_session_id(session_id)}.json"


def parse_result_key(key: str) -> ResultKey:
    """Split a result key into its ids.

    Raises:
        InvalidIdError: ``key`` is not ``{exp_id}/{input_id}/{session_id}.json`` with valid ids.
    """
    parts = key.split("/")
    if len(parts) != 3 or not parts[2].endswith(RESULT_SUFFIX):
        raise InvalidIdError(f"{key!r} is not a result key of the form exp_id/input_id/session_id.json")
    exp_id, input_id, file_name = parts
    session_id = file_name[: -len(RESULT_SUFFIX)]
    return ResultKey(validate_exp_id(exp_id), validate_input_id(input_id), validate_session_id(session_id))


def is_result_key(key: str) -> bool:
    """Return whether ``key`` parses as a result key (payload references and other objects do not)."""
    try:
        parse_result_key(key)
    except InvalidIdError:
        return False
    return True
