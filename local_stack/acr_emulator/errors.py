"""Failures the emulator reports the way ACR does: an HTTP status, ``x-amzn-ErrorType`` and ``{"message"}``.

``EmulatorError``
 ├── ``InvalidRequestError``        400 ValidationException
 ├── ``NotFoundError``              404 ResourceNotFoundException
 ├── ``SessionQuotaExceededError``  402 ServiceQuotaExceededException
 ├── ``ThrottledError``             429 ThrottlingException
 └── ``RuntimeClientError``         424 RuntimeClientError (agent not ready, failed or gone)
"""

from __future__ import annotations

from typing import ClassVar

from starlette.responses import JSONResponse

from rollout_contract.protocol import (
    ERROR_TYPE_HEADER,
    RESOURCE_NOT_FOUND,
    RUNTIME_CLIENT_ERROR,
    SERVICE_QUOTA_EXCEEDED,
    THROTTLING,
    VALIDATION,
    AcrError,
)

__all__ = [
    "EmulatorError",
    "InvalidRequestError",
    "NotFoundError",
    "RuntimeClientError",
    "SessionQuotaExceededError",
    "ThrottledError",
]


class EmulatorError(Exception):
    """A request the emulator rejects with an ACR error."""

    error: ClassVar[AcrError]

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_response(self) -> JSONResponse:
        """The ACR-shaped error response."""
        body = {"message": self.message}
        if self.error is VALIDATION:
            body["reason"] = "FieldValidationFailed"
        return JSONResponse(body, status_code=self.error.http_status, headers={ERROR_TYPE_HEADER: self.error.code})


class InvalidRequestError(EmulatorError):
    """The request breaks an input rule (session id length, payload size)."""

    error = VALIDATION


class NotFoundError(EmulatorError):
    """The runtime, qualifier or session does not exist."""

    error = RESOURCE_NOT_FOUND


class SessionQuotaExceededError(EmulatorError):
    """Starting a session would exceed the active-session quota."""

    error = SERVICE_QUOTA_EXCEEDED


class ThrottledError(EmulatorError):
    """The runtime's invoke rate is exhausted."""

    error = THROTTLING


class RuntimeClientError(EmulatorError):
    """The agent process did not become ready, failed the request or went away."""

    error = RUNTIME_CLIENT_ERROR
