"""The result-object key layout, ART's: ``{exp_id}/{input_id}/{session_id}.json``.

In this pipeline ``exp_id`` is ``experiment`` or ``experiment/run`` (``rollout_contract.ids``); a key parses
from the right, since input and session ids hold no ``/``.
"""

from __future__ import annotations

from typing import NamedTuple

from rollout_contract.ids import (
    RUN_SEPARATOR,
    InvalidIdError,
    split_exp_id,
    validate_input_id,
    validate_session_id,
)

RESULT_SUFFIX = ".json"
PAYLOAD_REF_PREFIX = "_payloads"


class ResultKey(NamedTuple):
    """The three ids a result key is made of."""

    exp_id: str
    input_id: str
    session_id: str

    def __str__(self) -> str:
        return f"{self.exp_id}/{self.input_id}/{self.session_id}{RESULT_SUFFIX}"

    @property
    def experiment(self) -> str:
        """The experiment the key's exp_id belongs to (its first part)."""
        return self.exp_id.partition(RUN_SEPARATOR)[0]


def result_key(exp_id: str, input_id: str, session_id: str) -> str:
    """Return the S3 key of a rollout's result object, validating every id."""
    split_exp_id(exp_id)
    return str(ResultKey(exp_id, validate_input_id(input_id), validate_session_id(session_id)))


def experiment_prefix(exp_id: str) -> str:
    """Return the key prefix under which an exp_id's objects live (``exp_id/``: an experiment's or a run's)."""
    split_exp_id(exp_id)
    return f"{exp_id}/"


def payload_ref_prefix(exp_id: str) -> str:
    """Return the key prefix under which an exp_id's oversized payloads are parked (``_payloads/exp_id/``)."""
    split_exp_id(exp_id)
    return f"{PAYLOAD_REF_PREFIX}/{exp_id}/"


def payload_ref_key(exp_id: str, session_id: str) -> str:
    """Return the key where a payload too large for SQS is parked.

    It lies outside the experiment's prefix, so parking a payload never fires the result rule.
    """
    return f"{payload_ref_prefix(exp_id)}{validate_session_id(session_id)}.json"


def parse_result_key(key: str) -> ResultKey:
    """Split a result key of this pipeline into its ids, from the right.

    Raises:
        InvalidIdError: ``key`` is not ``{exp_id}/{input_id}/{session_id}.json`` with valid ids and an exp_id
            that starts with an experiment name.
    """
    exp_id, _, rest = key.rpartition("/")
    exp_id, _, input_id = exp_id.rpartition("/")
    if not exp_id or not rest.endswith(RESULT_SUFFIX):
        raise InvalidIdError(f"{key!r} is not a result key of the form exp_id/input_id/session_id.json")
    split_exp_id(exp_id)
    session_id = rest[: -len(RESULT_SUFFIX)]
    return ResultKey(exp_id, validate_input_id(input_id), validate_session_id(session_id))


def is_result_key(key: str) -> bool:
    """Return whether ``key`` parses as a result key (payload references and other objects do not)."""
    try:
        parse_result_key(key)
    except InvalidIdError:
        return False
    return True
