"""Exceptions of the Lambda functions besides the budget machinery's (``rollout_budgets.errors``)."""

from __future__ import annotations


class RolloutsLambdaError(Exception):
    """Base class of every error the Lambda functions raise on purpose."""


class RequeueError(RolloutsLambdaError):
    """The message goes back to its queue and is seen again after ``delay_s`` seconds."""

    def __init__(self, reason: str, delay_s: float) -> None:
        super().__init__(f"{reason}; retrying in {delay_s:.1f} s")
        self.reason = reason
        self.delay_s = delay_s
