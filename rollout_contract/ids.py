"""Identifier rules: experiment, input and session (= rollout) ids.

Every id ends up in an S3 key, a DynamoDB key and (for sessions) an ACR header, so the rules are the
strictest of the three. All validators raise :class:`InvalidIdError` with a message that says what is
wrong and how to fix it.
"""

from __future__ import annotations

import re
import uuid

from rollout_contract.naming import EXP_ID_MAX_LENGTH, LIMITING_NAME

SESSION_ID_MIN_LENGTH = 33
SESSION_ID_MAX_LENGTH = 256
INPUT_ID_MAX_LENGTH = 512

_EXP_ID_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$")
# Characters that URL encoding leaves as they are: S3 event notifications URL-encode object keys, so
# keys made only of these read the same in every event shape.
_KEY_SAFE_RE = re.compile(r"^[A-Za-z0-9._~-]+$")
_KEY_SAFE_HINT = "use only letters, digits, '.', '_', '~' and '-' (S3 events URL-encode other characters)"


class InvalidIdError(ValueError):
    """An experiment, input or session id breaks the contract's rules."""


def validate_exp_id(exp_id: str) -> str:
    """Return ``exp_id`` if it can name an experiment, else raise :class:`InvalidIdError`.

    Experiment ids become S3 prefixes and parts of AWS resource names (queues, tables, stacks), so they
    are lowercase letters, digits and inner hyphens, at most :data:`EXP_ID_MAX_LENGTH` characters (what
    the longest derived name leaves, see ``rollout_contract.naming``).
    """
    if not isinstance(exp_id, str) or not exp_id:
        raise InvalidIdError("exp_id must be a non-empty string, e.g. 'gsm8k-grpo-1'")
    if len(exp_id) > EXP_ID_MAX_LENGTH or not _EXP_ID_RE.match(exp_id):
        raise InvalidIdError(
            f"exp_id {exp_id!r} is invalid: use 1-{EXP_ID_MAX_LENGTH} lowercase letters, digits and "
            "hyphens, starting and ending with a letter or digit (it names AWS resources; the longest, "
            f"{LIMITING_NAME.template!r}, is limited by {LIMITING_NAME.limited_by})"
        )
    return exp_id


def validate_input_id(input_id: str) -> str:
    """Return ``input_id`` if it can be a result-key segment, else raise :class:`InvalidIdError`."""
    if not isinstance(input_id, str) or not input_id:
        raise InvalidIdError("input_id must be a non-empty string (it groups the samples of one prompt)")
    if len(input_id) > INPUT_ID_MAX_LENGTH:
        raise InvalidIdError(f"input_id is {len(input_id)} characters; the limit is {INPUT_ID_MAX_LENGTH}")
    if not _KEY_SAFE_RE.match(input_id):
        raise InvalidIdError(f"input_id {input_id!r} is invalid: {_KEY_SAFE_HINT}")
    return input_id


def validate_session_id(session_id: str) -> str:
    """Return ``session_id`` if ACR and the result key accept it, else raise :class:`InvalidIdError`.

    ACR requires 33-256 characters; the result key and the token gateway's session URL forbid ``/``.
    """
    if not isinstance(session_id, str):
        raise InvalidIdError(f"session_id must be a string, got {type(session_id).__name__}")
    if not SESSION_ID_MIN_LENGTH <= len(session_id) <= SESSION_ID_MAX_LENGTH:
        raise InvalidIdError(
            f"session_id {session_id!r} is {len(session_id)} characters; AgentCore Runtime requires "
            f"{SESSION_ID_MIN_LENGTH}-{SESSION_ID_MAX_LENGTH} (a uuid4 string has 36)"
        )
    return validate_session_key_segment(session_id)


def validate_session_key_segment(session_id: str) -> str:
    """Return ``session_id`` if it can end a result key (1-256 key-safe characters), else raise.

    The agent side checks only this: ACR itself refuses session ids shorter than 33 characters, so an
    agent sees a short one only when called directly (local tests, ``curl``), where ART accepts it too.
    """
    if not isinstance(session_id, str) or not session_id:
        raise InvalidIdError("session_id must be a non-empty string")
    if len(session_id) > SESSION_ID_MAX_LENGTH:
        raise InvalidIdError(f"session_id is {len(session_id)} characters; the limit is {SESSION_ID_MAX_LENGTH}")
    if not _KEY_SAFE_RE.match(session_id):
        raise InvalidIdError(f"session_id {session_id!r} is invalid: {_KEY_SAFE_HINT}")
    return session_id


def new_session_id() -> str:
    """Return a fresh session (= rollout) id: a uuid4 string, 36 characters."""
    return str(uuid.uuid4())
