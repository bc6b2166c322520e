"""Settings as small frozen pydantic models with named defaults and declared bounds (D82, D85)."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from pydantic import Field

from rollout_contract.messages import SAVE_FIELDS
from rollout_contract.settings import Settings
from trainer_client._exceptions import MissingRolloutFieldError

__all__ = [
    "DEFAULT_POLL",
    "DEFAULT_ROLLOUT_TIMEOUT_S",
    "DEFAULT_TRACES",
    "PollSettings",
    "RolloutDefaults",
    "RolloutOptions",
    "TraceSettings",
    "require_fields",
    "rollout_fields",
]

#: Seconds a rollout may run before the sweeper ends it as ``timed_out`` (ART's batch default).
DEFAULT_ROLLOUT_TIMEOUT_S = 900.0


class PollSettings(Settings):
    """How the completion poller reads the completion queue.

    Attributes:
        wait_time_s: SQS long-poll wait (0-20 s). Tests use 1 to stop fast.
        max_messages: messages per receive (1-10).
        fetch_workers: threads reading result objects in parallel.
        remember: how many finished session ids are kept to recognize duplicate events.
        idle_backoff_s: pause after a receive that held only other processes' messages, so that two
            trainers on one experiment do not spin handing messages back and forth.
        deadline_grace_s: how long after a rollout's deadline its result (the agent's, or the sweeper's
            ``timed_out``, which it writes within a minute) may still come; past it, a future whose event never
            came reads the stored result itself, and fails with ``RolloutTimeoutError`` if there is none.
        fallback_reads_per_s: stored results those late futures read per second at most.
        lease_s: how long this client's trainer lease lasts (renewed after each receive once a quarter has
            passed, while rollouts are pending; at least twice ``wait_time_s``); events of a trainer whose lease
            ran out are deleted by other trainers' pollers.
        lease_cache_s: how long another trainer's lease, once read, is believed.
        unavailable_after_s: how long the completion queue or the results bucket may stay unreachable
            before pending futures fail with ``StoreUnavailableError``.
        receivers: receiver threads; one long-polls at a time and hands the listening over when its receive
            returns, so while one reads its batch's results the next event goes to another.
    """

    wait_time_s: int = Field(default=20, ge=0, le=20)
    max_messages: int = Field(default=10, ge=1, le=10)
    fetch_workers: int = Field(default=8, ge=1)
    remember: int = Field(default=1 << 17, ge=1)
    idle_backoff_s: float = Field(default=0.2, ge=0)
    deadline_grace_s: float = Field(default=120.0, ge=0)
    unavailable_after_s: float = Field(default=120.0, gt=0)
    receivers: int = Field(default=2, ge=1)
    fallback_reads_per_s: float = Field(default=20.0, gt=0)
    lease_s: float = Field(default=120.0, gt=0)
    lease_cache_s: float = Field(default=5.0, ge=0)


class TraceSettings(Settings):
    """How token traces are read from the gateway after a result arrives.

    ``trainer_client.gateway`` answers one exact read once the session's model calls and trace writes are
    done. A plain rllm-model-gateway writes traces fire-and-forget, so against it the client re-reads while
    the trace count still grows, a bounded number of times.

    Attributes:
        attempts: reads at most (plain gateway).
        delay_s: pause between reads (plain gateway).
        timeout_s: HTTP timeout per read, on top of ``settle_s``.
        settle_s: how long the gateway may wait for the session's calls still in flight.
    """

    attempts: int = Field(default=4, ge=1)
    delay_s: float = Field(default=0.25, ge=0)
    timeout_s: float = Field(default=10.0, gt=0)
    settle_s: float = Field(default=30.0, ge=0)


DEFAULT_POLL = PollSettings()
DEFAULT_TRACES = TraceSettings()


class RolloutDefaults(TypedDict, total=False):
    """The keyword-only ``_rollout`` fields of ``RolloutClient(...)`` (``base_url``, ``model_id`` are positional)."""

    sampling_params: Mapping[str, Any]
    api_key: str
    rollout_config: Mapping[str, Any]


class RolloutOptions(RolloutDefaults, total=False):
    """The ``_rollout`` fields a keyword argument may set (ART's names), plus ``rollout_config``.

    ``RolloutClient(...)`` takes ``base_url`` and ``model_id`` as ART's positional parameters and the rest
    as keywords (:class:`RolloutDefaults`); ``invoke`` and the batch methods take all of them as per-rollout
    overrides. Any other agent configuration goes in ``rollout_config``, a mapping merged into ``_rollout``
    first, so that a misspelt keyword (``timeuot=``) is an error instead of a field the agent silently ignores.
    """

    base_url: str
    model_id: str


_ROLLOUT_KEYWORDS = ("base_url", "model_id", *RolloutDefaults.__annotations__)
# Named parameters of the client's methods: suggested when a keyword is a near miss of one of them.
_OTHER_KEYWORDS = ("timeout", "input_id", "input_ids", "session_id", "session_ids", "journal", "gateway_url", "poll")


#: How to give each field the experiments' agents commonly need.
_HOW_TO_GIVE = {
    "model_id": "model_id=NAME (RolloutClient.for_experiment or invoke), `rollouts eval --model-id NAME`, or a "
    "default for the experiment: -c model_id=NAME at deploy, `rollouts local up --model-id NAME`",
    "base_url": "base_url=URL (RolloutClient.for_experiment or invoke), `rollouts eval --base-url URL`, or the "
    "experiment's token gateway (-c gateway_url=URL)",
}


def require_fields(rollout: Mapping[str, Any], required: Sequence[str], exp_id: str) -> None:
    """Refuse ``rollout`` when one of the ``required`` ``_rollout`` fields is missing or empty.

    Raises:
        MissingRolloutFieldError: the message names each missing field and how to give it.
    """
    missing = [name for name in required if rollout.get(name) in (None, "")]
    if missing:
        ways = "; ".join(f"{name}: {_HOW_TO_GIVE.get(name, f'rollout_config={{{name!r}: ...}}')}" for name in missing)
        raise MissingRolloutFieldError(
            f"experiment {exp_id!r}'s agent needs _rollout.{', _rollout.'.join(missing)}, which this rollout lacks "
            f"(it would fail in the agent); give {ways}"
        )


def rollout_fields(options: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Return the ``_rollout`` fields that keyword ``options`` of ``where`` set (``None`` values dropped).

    Raises:
        TypeError: an unknown keyword; the message names the close matches and ``rollout_config``.
        ValueError: ``rollout_config`` sets a field the client owns (``exp_id``, ``input_id``, ``s3_bucket``).
    """
    unknown = [name for name in options if name not in _ROLLOUT_KEYWORDS]
    if unknown:
        hints = []
        for name in unknown:
            close = difflib.get_close_matches(name, (*_ROLLOUT_KEYWORDS, *_OTHER_KEYWORDS), n=1)
            hints.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise TypeError(
            f"{where} got unexpected keyword argument(s) {', '.join(hints)}. Known keywords for the agent's "
            f"_rollout block: {', '.join(_ROLLOUT_KEYWORDS)}; pass any other agent configuration explicitly as "
            f"rollout_config={{{unknown[0]!r}: ...}}"
        )
    config = dict(options.get("rollout_config") or {})
    owned = sorted(set(config) & set(SAVE_FIELDS))
    if owned:
        raise ValueError(
            f"rollout_config sets {', '.join(owned)}, which the client fills in from the experiment and the "
            "rollout's ids; pass input_id as an argument instead"
        )
    config.update((name, value) for name, value in options.items() if name != "rollout_config")
    return {name: value for name, value in config.items() if value is not None}
