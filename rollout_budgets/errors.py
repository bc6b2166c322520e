"""What the budget machinery raises: no invoke token in reach, and failed AgentCore Runtime calls."""

from __future__ import annotations


class BudgetError(Exception):
    """Base class of the errors the budget machinery raises on purpose."""


class NoTokenError(BudgetError):
    """No invoke slot of the TPS budget frees up within the wait allowed."""

    def __init__(self, retry_after_s: float) -> None:
        super().__init__(f"no invoke slot within the allowed wait; the next frees up in {retry_after_s:.2f} s")
        self.retry_after_s = retry_after_s


class AcrCallError(BudgetError):
    """An AgentCore Runtime data-plane call failed with error ``code`` (HTTP ``http_status``, 0 if none)."""

    def __init__(self, code: str, http_status: int, message: str) -> None:
        super().__init__(f"{code} ({http_status}): {message}")
        self.code = code
        self.http_status = http_status
        self.message = message


class RetryableAcrError(AcrCallError):
    """The call may succeed later (throttling, quota, cold start, conflict, server or transport error)."""


class FinalAcrError(AcrCallError):
    """The call cannot succeed as made (validation, access denied, runtime not found)."""
