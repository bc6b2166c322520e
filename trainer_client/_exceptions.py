"""The trainer client's errors: one base, catchable by family.

- RolloutError
    - ClientError: the client cannot do what was asked.
        - ExperimentNotFoundError
        - ClientClosedError
        - DuplicateSessionError (also a ValueError): a session id this client already used.
    - StoreUnavailableError: the queues or the bucket could not be reached for too long.
    - DispatchError: the rollout did not start.
        - SubmitError: the dispatch queue refused the request.
        - DispatchFailedError: status ``dispatch_failed``.
    - AgentError: status ``agent_error``.
    - RolloutTimeoutError: status ``timed_out`` (the deadline passed, or no result came in time).
    - RolloutCancelledError: status ``cancelled``.

``future.result()`` returns the result for every terminal status; the status errors come from
``result.raise_for_status()`` and from batch items, for users who prefer exceptions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainer_client._results import ClientResult

__all__ = [
    "AgentError",
    "ClientClosedError",
    "ClientError",
    "DispatchError",
    "DispatchFailedError",
    "DuplicateSessionError",
    "ExperimentNotFoundError",
    "RolloutCancelledError",
    "RolloutError",
    "RolloutTimeoutError",
    "StoreUnavailableError",
    "SubmitError",
]


class RolloutError(Exception):
    """Base of every error the trainer client raises; ``result`` is the rollout's result when there is one."""

    def __init__(self, message: str, *, result: ClientResult | None = None) -> None:
        super().__init__(message)
        self.result = result


class ClientError(RolloutError):
    """The client cannot do what was asked (configuration, lifecycle)."""


class ExperimentNotFoundError(ClientError):
    """The experiment's descriptor or queues do not exist."""


class ClientClosedError(ClientError):
    """The client was closed while the rollout was still pending."""


class DispatchError(RolloutError):
    """The rollout did not start."""


class SubmitError(DispatchError):
    """The dispatch queue did not accept the request."""


class DispatchFailedError(DispatchError):
    """The dispatcher gave up invoking the agent (status ``dispatch_failed``)."""


class AgentError(RolloutError):
    """The agent's handler raised or returned something that is not a dict (status ``agent_error``)."""


class RolloutTimeoutError(RolloutError):
    """The rollout passed its deadline (status ``timed_out``), or its result did not arrive in time."""


class RolloutCancelledError(RolloutError):
    """The rollout was cancelled (status ``cancelled``)."""


class DuplicateSessionError(ClientError, ValueError):
    """A session id this client already has pending or finished; each rollout needs its own."""


class StoreUnavailableError(RolloutError):
    """The completion queue or the results bucket could not be reached for longer than allowed."""
