"""Identifier rules: experiment, run, exp_id, input and session (= rollout) ids.

Every id ends up in an S3 key, a DynamoDB key and (for sessions) an ACR header, so the rules are the
strictest of the three. All validators raise :class:`InvalidIdError` with a message that says what is
wrong and how to fix it.

An *experiment* is what is deployed: its name names AWS resources (queues, tables, a rule), so it is short
and lowercase. An *exp_id* is ART's label of a rollout's results, the first part of the result key
``{exp_id}/{input_id}/{session_id}.json``; in this pipeline it is ``experiment`` or ``experiment/run``,
where the *run* is a free label (letters, digits, ``.``, ``_``, ``~``, ``-``, and ``/`` between parts), so
one deployed experiment serves many runs. Keys parse from the right (input and session ids hold no ``/``),
so they stay unambiguous; the experiment's rule prefix ``experiment/`` covers all its runs.
"""

from __future__ import annotations

import re
import uuid

from rollout_contract.naming import EXPERIMENT_MAX_LENGTH, LIMITING_NAME
from rollout_contract.sandbox import SANDBOX_SESSION_PREFIX, is_sandbox_session

SESSION_ID_MIN_LENGTH = 33
SESSION_ID_MAX_LENGTH = 256
INPUT_ID_MAX_LENGTH = 512
#: S3's limit on a key, in bytes (key-safe ids are ASCII: one byte a character).
S3_KEY_MAX_LENGTH = 1024
#: The longest exp_id a result key still has room for (``/input_id/session_id.json`` at their longest).
EXP_ID_MAX_LENGTH = S3_KEY_MAX_LENGTH - len(
    "/" + "i" * INPUT_ID_MAX_LENGTH + "/" + "s" * SESSION_ID_MAX_LENGTH + ".json"
)
#: The longest run label: what an exp_id leaves after the longest experiment name and its ``/``.
RUN_MAX_LENGTH = EXP_ID_MAX_LENGTH - EXPERIMENT_MAX_LENGTH - 1
RUN_SEPARATOR = "/"

_EXPERIMENT_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$")
# Characters that URL encoding leaves as they are: S3 event notifications URL-encode object keys, so
# keys made only of these read the same in every event shape.
_KEY_SAFE_RE = re.compile(r"^[A-Za-z0-9._~-]+$")
_KEY_SAFE_HINT = "use only letters, digits, '.', '_', '~' and '-' (S3 events URL-encode other characters)"
# Parts of key-safe characters joined by single '/'.
_LABEL_RE = re.compile(r"^[A-Za-z0-9._~-]+(?:/[A-Za-z0-9._~-]+)*$")
_LABEL_HINT = "use letters, digits, '.', '_', '~' and '-', with '/' only between parts (no empty part)"


class InvalidIdError(ValueError):
    """An experiment, run, exp_id, input or session id breaks the contract's rules."""


def validate_experiment(name: str) -> str:
    """Return ``name`` if it can name a deployed experiment, else raise :class:`InvalidIdError`.

    Experiment names become S3 prefixes and parts of AWS resource names (queues, tables, stacks), so they
    are lowercase letters, digits and inner hyphens, at most :data:`EXPERIMENT_MAX_LENGTH` characters (what
    the longest derived name leaves, see ``rollout_contract.naming``).
    """
    if not isinstance(name, str) or not name:
        raise InvalidIdError("the experiment name must be a non-empty string, e.g. 'gsm8k-grpo-1'")
    if RUN_SEPARATOR in name:
        experiment, _, run = name.partition(RUN_SEPARATOR)
        raise InvalidIdError(
            f"{name!r} is an exp_id (experiment {experiment!r}, run {run!r}), not an experiment name: give the "
            f"experiment and the run apart, e.g. RolloutClient.for_experiment({experiment!r}, run={run!r}) or "
            f"--run {run}"
        )
    if len(name) > EXPERIMENT_MAX_LENGTH or not _EXPERIMENT_RE.match(name):
        raise InvalidIdError(
            f"experiment {name!r} is invalid: use 1-{EXPERIMENT_MAX_LENGTH} lowercase letters, digits and "
            "hyphens, starting and ending with a letter or digit (it names AWS resources; the longest, "
            f"{LIMITING_NAME.template!r}, is limited by {LIMITING_NAME.limited_by}); a free label such as "
            "'qwen3_gsm8k' can be the run: experiment/run"
        )
    return name


def validate_run(run: str) -> str:
    """Return ``run`` if it can label a run of an experiment (the part of the exp_id after ``experiment/``)."""
    if not isinstance(run, str) or not run:
        raise InvalidIdError("a run label must be a non-empty string, e.g. 'qwen3_gsm8k' or '2024-06-01/lr-3e-6'")
    if len(run) > RUN_MAX_LENGTH:
        raise InvalidIdError(f"run {run[:40]!r}... is {len(run)} characters; the limit is {RUN_MAX_LENGTH}")
    if not _LABEL_RE.match(run):
        raise InvalidIdError(f"run {run!r} is invalid: {_LABEL_HINT}")
    return run


def validate_exp_id(exp_id: str) -> str:
    """Return ``exp_id`` if it can begin a result key, else raise :class:`InvalidIdError`.

    This is the agent's rule, as liberal as the key layout allows (ART stores under any label): parts of
    key-safe characters joined by ``/``, at most :data:`EXP_ID_MAX_LENGTH` characters. The pipeline needs
    more (the first part names a deployed experiment): see :func:`split_exp_id`.
    """
    if not isinstance(exp_id, str) or not exp_id:
        raise InvalidIdError("exp_id must be a non-empty string, e.g. 'gsm8k-grpo-1' or 'gsm8k-grpo-1/run-2'")
    if len(exp_id) > EXP_ID_MAX_LENGTH:
        raise InvalidIdError(
            f"exp_id is {len(exp_id)} characters; the limit is {EXP_ID_MAX_LENGTH} (S3 keys hold {S3_KEY_MAX_LENGTH})"
        )
    if not _LABEL_RE.match(exp_id):
        raise InvalidIdError(f"exp_id {exp_id!r} is invalid: {_LABEL_HINT}")
    return exp_id


def split_exp_id(exp_id: str) -> tuple[str, str | None]:
    """Return ``(experiment, run)`` of a pipeline exp_id (``experiment`` or ``experiment/run``; run ``None``).

    Raises:
        InvalidIdError: ``exp_id`` breaks :func:`validate_exp_id`, or its first part is not an experiment
            name (:func:`validate_experiment`); the message says how to keep a free label as the run.
    """
    experiment, _, run = validate_exp_id(exp_id).partition(RUN_SEPARATOR)
    try:
        validate_experiment(experiment)
    except InvalidIdError as exc:
        raise InvalidIdError(f"exp_id {exp_id!r} must start with an experiment name: {exc}") from None
    return experiment, validate_run(run) if run else None


def join_exp_id(experiment: str, run: str | None = None) -> str:
    """Return the exp_id of ``run`` of ``experiment`` (the experiment alone when ``run`` is ``None``)."""
    experiment = validate_experiment(experiment)
    return experiment if run is None else f"{experiment}{RUN_SEPARATOR}{validate_run(run)}"


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


def validate_rollout_session_id(session_id: str) -> str:
    """Return ``session_id`` if a rollout may use it: :func:`validate_session_id`, and not a sandbox's id.

    Ids starting with ``sandbox.SANDBOX_SESSION_PREFIX`` are reserved for sandboxes: the sweeper ends those
    without writing a result, so a rollout under such an id would never get one.
    """
    validate_session_id(session_id)
    if is_sandbox_session(session_id):
        raise InvalidIdError(
            f"session_id {session_id!r} starts with {SANDBOX_SESSION_PREFIX!r}, which is reserved for sandbox "
            "sessions; give a rollout another id (or none: a uuid4 is made)"
        )
    return session_id


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
