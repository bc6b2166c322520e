"""What the adapters share: one client per process, and running one rollout to its outcome.

verl instantiates its agent loop for every sample and slime calls its generate hook per sample; each
would otherwise open its own SQS long poll. :func:`shared_client` hands them one client (one poller,
one connection pool) per experiment, closed when the process exits (ART builds a session per rollout,
likewise). :func:`run_rollout` submits one rollout, waits for its event and says how it ended, never
raising for a rollout that failed; rLLM's runtime and ART's session use it with the framework's session id.
"""

from __future__ import annotations

import asyncio
import atexit
import hashlib
import importlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rollout_contract import InvalidIdError, Status, validate_input_id
from trainer_client._batch import BatchItem
from trainer_client._client import RolloutClient
from trainer_client._exceptions import RolloutError, SubmitError
from trainer_client._future import RolloutFuture
from trainer_client._results import ClientResult, TokenTrace

__all__ = [
    "NOT_SUBMITTED",
    "NO_RESULT",
    "RolloutOutcome",
    "cancel_quietly",
    "close_shared_clients",
    "group_input_id",
    "load_function",
    "run_rollout",
    "shared_client",
    "wait_for_result",
]

#: Outcome status of a rollout the dispatch queue refused (or the client could not send).
NOT_SUBMITTED = "not_submitted"
#: Outcome status of a rollout with no result by its deadline plus the poller's grace.
NO_RESULT = "no_result"

logger = logging.getLogger("trainer_client.backends")

_lock = threading.Lock()
_clients: dict[tuple[str, str | None, str | None], RolloutClient] = {}


def shared_client(
    experiment: str,
    *,
    region: str | None = None,
    model_id: str | None = None,
    factory: Callable[..., RolloutClient] = RolloutClient.for_experiment,
    **kwargs: Any,
) -> RolloutClient:
    """The process's client of ``experiment`` (made on first use with ``factory(experiment, region=, model_id=)``).

    ``kwargs`` go to ``factory`` on first use only.
    """
    key = (experiment, region, model_id)
    with _lock:
        client = _clients.get(key)
        if client is None:
            client = factory(experiment, region=region, model_id=model_id, **kwargs)
            if not _clients:
                atexit.register(close_shared_clients)
            _clients[key] = client
        return client


def close_shared_clients() -> None:
    """Close every shared client (pending futures fail with ``ClientClosedError``)."""
    with _lock:
        clients = list(_clients.values())
        _clients.clear()
    for client in clients:
        client.close()


@dataclass(frozen=True, slots=True)
class RolloutOutcome:
    """How one rollout ended.

    Attributes:
        status: the result's status (``succeeded``, ``agent_error``, ...), or :data:`NOT_SUBMITTED` /
            :data:`NO_RESULT` when there is no result.
        result: the terminal result, if one came.
        error: what went wrong, for every status but ``succeeded``.
        elapsed: seconds from submission to the result.
    """

    status: str
    result: ClientResult | None
    error: str | None
    elapsed: float

    @classmethod
    def of(cls, result: ClientResult, elapsed: float) -> RolloutOutcome:
        """The outcome of a rollout that has its terminal ``result``."""
        error = None
        if result.status is not Status.SUCCEEDED:
            error = f"{result.status.value}: {result.error.message if result.error else result.stop_reason}"
        return cls(result.status.value, result, error, elapsed)

    @classmethod
    def of_item(cls, item: BatchItem) -> RolloutOutcome:
        """The outcome of one item of :meth:`RolloutClient.run_batch` / ``run_groups``."""
        if item.result is not None:
            return cls.of(item.result, item.elapsed)
        return cls.of_error(item.exception, item.elapsed)

    @classmethod
    def of_error(cls, error: BaseException | None, elapsed: float) -> RolloutOutcome:
        """The outcome of a rollout without a result: never submitted, or no result came."""
        status = NOT_SUBMITTED if isinstance(error, SubmitError) else NO_RESULT
        return cls(status, None, f"{type(error).__name__}: {error}", elapsed)

    @property
    def succeeded(self) -> bool:
        """The agent finished and stored its result."""
        return self.status == Status.SUCCEEDED.value

    @property
    def session_id(self) -> str:
        """The rollout's session id ("" if it was never submitted)."""
        return self.result.session_id if self.result is not None else ""

    @property
    def token_traces(self) -> list[TokenTrace]:
        """The model calls the gateway recorded for the rollout (``[]`` if none)."""
        return (self.result.token_traces or []) if self.result is not None else []


def group_input_id(group: object) -> str:
    """Our ``input_id`` for a framework's group key: the key itself if it is key-safe, else a stable digest.

    Frameworks name groups freely (``"gsm8k:17"``, a dataset index); result keys allow only letters,
    digits, ``.``, ``_``, ``~`` and ``-``. The digest keeps equal keys in one group.
    """
    text = str(group)
    try:
        return validate_input_id(text)
    except InvalidIdError:
        return "g-" + hashlib.sha256(text.encode()).hexdigest()[:40]


async def wait_for_result(future: RolloutFuture, grace_s: float) -> ClientResult | None:
    """Await ``future``'s result; ``None`` if none came ``grace_s`` after its deadline (not even the sweeper's).

    The rollout's deadline is server-side: at it the sweeper writes ``timed_out``, so a result normally
    arrives. The grace only bounds the wait if that machinery is gone.
    """
    timeout = None if future.deadline_at is None else max(future.deadline_at - time.time(), 0.0) + grace_s
    try:
        return await future.result_async(timeout=timeout, cancel_on_timeout=False)
    except TimeoutError:
        return None


async def run_rollout(
    client: RolloutClient,
    payload: Mapping[str, Any],
    group: object,
    timeout_s: float,
    *,
    session_id: str | None = None,
    **overrides: Any,
) -> RolloutOutcome:
    """Submit one rollout in GRPO group ``group`` and await its result; cancelling the caller cancels it.

    ``session_id`` is the rollout's id when the framework chose it (default: a new one). A caller cancelled
    while the request is being sent still cancels the rollout, once it is sent.
    """
    sending = asyncio.ensure_future(
        client.invoke_async(
            payload, session_id=session_id, input_id=group_input_id(group), timeout=timeout_s, **overrides
        )
    )
    try:
        future = await asyncio.shield(sending)
    except asyncio.CancelledError:
        sending.add_done_callback(_cancel_once_sent)
        raise
    except RolloutError as exc:
        return RolloutOutcome.of_error(exc, 0.0)
    try:
        result = await wait_for_result(future, client.poll_settings.deadline_grace_s)
    except asyncio.CancelledError:
        cancel_quietly(future)
        raise
    except RolloutError as exc:
        return RolloutOutcome.of_error(exc, future.elapsed())
    if result is None:
        message = f"no result for rollout {future.session_id} by its deadline ({timeout_s:.0f} s) plus grace"
        return RolloutOutcome(NO_RESULT, None, message, future.elapsed())
    return RolloutOutcome.of(result, future.elapsed())


def cancel_quietly(future: RolloutFuture) -> None:
    """Cancel a rollout; a cancel request the queue refuses is logged (the deadline still ends the rollout)."""
    try:
        future.cancel()
    except RolloutError as exc:
        logger.warning("could not cancel rollout %s: %s", future.session_id, exc)


def _cancel_once_sent(sending: asyncio.Future[RolloutFuture]) -> None:
    if not sending.cancelled() and sending.exception() is None:
        cancel_quietly(sending.result())


def load_function(path: str, setting: str) -> Callable[..., Any]:
    """Import ``module.function`` (or ``module:function``) named by the framework setting ``setting``.

    Raises:
        ValueError: ``path`` names no module.
    """
    module_name, _, attr = path.replace(":", ".").rpartition(".")
    if not module_name:
        raise ValueError(f"{setting} must be 'module.function', got {path!r}")
    function: Callable[..., Any] = getattr(importlib.import_module(module_name), attr)
    return function
