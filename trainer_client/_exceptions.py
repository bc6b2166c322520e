"""The trainer client's errors: one base, catchable by family.

- RolloutError
    - RolloutClientError: the client cannot do what was asked.
        - ExperimentNotFoundError
        - ClientClosedError
        - AwsError: an AWS call failed (botocore's error is ``__cause__``).
        - DuplicateSessionError (also a ValueError): a session id this client already used.
        - MissingRolloutFieldError (also a ValueError): a ``_rollout`` field the experiment's agent needs.
    - StoreUnavailableError: the queues or the bucket could not be reached for too long.
    - DispatchError: the rollout did not start.
        - SubmitError: the dispatch queue (or the payload upload) refused the request.
        - DispatchFailedError: status ``dispatch_failed``.
    - AgentError: status ``agent_error``.
    - RolloutTimeoutError: status ``timed_out`` (the deadline passed, or no result came in time).
    - RolloutCancelledError: status ``cancelled``.

``future.result()`` returns the result for every terminal status; the status errors come from
``result.raise_for_status()`` and from batch items, for users who prefer exceptions. No botocore error
leaves a public method: they arrive as :class:`AwsError` or :class:`SubmitError`, with botocore's error as
``__cause__``. (``RolloutClientError`` is not botocore's ``ClientError``, which it was once named like.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainer_client._results import ClientResult

__all__ = [
    "AgentError",
    "AwsError",
    "ClientClosedError",
    "DispatchError",
    "DispatchFailedError",
    "DuplicateSessionError",
    "ExperimentNotFoundError",
    "MissingRolloutFieldError",
    "RolloutCancelledError",
    "RolloutClientError",
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


class RolloutClientError(RolloutError):
    """The client cannot do what was asked (configuration, lifecycle, AWS)."""


class MissingRolloutFieldError(RolloutClientError, ValueError):
    """A rollout lacks a ``_rollout`` field its experiment's agent needs (refused before anything is sent)."""


class ExperimentNotFoundError(RolloutClientError):
    """The experiment's descriptor or queues do not exist."""


class ClientClosedError(RolloutClientError):
    """The client was closed while the rollout was still pending."""


class AwsError(RolloutClientError):
    """An AWS call failed; ``code`` is AWS's error code (``""`` when none came back, e.g. no connection).

    botocore's exception is ``__cause__``.
    """

    def __init__(self, message: str, *, code: str = "") -> None:
        super().__init__(message)
        self.code = code


class DispatchError(RolloutError):
    """The rollout did not start."""


class SubmitError(DispatchError):
    """The dispatch queue did not accept the request, or a large payload could not be uploaded."""


class DispatchFailedError(DispatchError):
    """The dispatcher gave up invoking the agent (status ``dispatch_failed``)."""


class AgentError(RolloutError):
    """The agent's handler raised or returned something that is not a dict (status ``agent_error``)."""


class RolloutTimeoutError(RolloutError):
    """The rollout passed its deadline (status ``timed_out``), or its result did not arrive in time."""


class RolloutCancelledError(RolloutError):
    """The rollout was cancelled (status ``cancelled``)."""


class DuplicateSessionError(RolloutClientError, ValueError):
    """A session id this client already has pending or finished; each rollout needs its own."""


class StoreUnavailableError(RolloutError):
    """The completion queue or the results bucket could not be reached for longer than allowed."""
