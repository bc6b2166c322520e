"""What a trainer gets back: the stored result, its token traces, and ``raise_for_status``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict

from rollout_contract import RolloutResult, Status
from trainer_client._exceptions import (
    AgentError,
    DispatchFailedError,
    RolloutCancelledError,
    RolloutError,
    RolloutTimeoutError,
)

__all__ = ["ClientResult", "TokenTrace"]

_STATUS_ERRORS: dict[Status, type[RolloutError]] = {
    Status.AGENT_ERROR: AgentError,
    Status.TIMED_OUT: RolloutTimeoutError,
    Status.CANCELLED: RolloutCancelledError,
    Status.DISPATCH_FAILED: DispatchFailedError,
}


class TokenTrace(BaseModel):
    """One model call the token gateway recorded for a session (choice 0 only, as the gateway keeps it)."""

    model_config = ConfigDict(extra="allow")

    trace_id: str
    session_id: str
    model: str = ""
    messages: list[dict[str, Any]] = []
    prompt_token_ids: list[int] = []
    response_message: dict[str, Any] = {}
    completion_token_ids: list[int] = []
    logprobs: list[float] | None = None
    finish_reason: str | None = None


class ClientResult(RolloutResult):
    """A rollout's terminal result as the trainer sees it.

    The stored :class:`rollout_contract.RolloutResult` plus ``token_traces``: the token ids and logprobs the
    gateway recorded for the session (``None`` when the client has no gateway, ``[]`` when it recorded
    no call).

    It also reads like ART's result dict: ``result["rewards"]``, ``result.get("stop_reason")``, ``"error" in
    result``, ``result.keys()`` and ``dict(result)`` give the stored JSON document (fields that are ``None``
    are absent, enums are their strings, nested models are dicts), while the attributes stay typed.
    """

    token_traces: list[TokenTrace] | None = None

    def __getitem__(self, key: str) -> Any:
        extra = self.model_extra or {}
        if key in extra:
            return extra[key]
        if key in type(self).model_fields and getattr(self, key) is not None:
            return self.model_dump(mode="json", include={key})[key]
        raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in self.keys()

    def get(self, key: str, default: Any = None) -> Any:
        """``self[key]``, or ``default`` when the document has no ``key``."""
        try:
            return self[key]
        except KeyError:
            return default

    def keys(self) -> list[str]:
        """The document's keys: set fields first, then what the handler returned beyond them."""
        fields = [name for name in type(self).model_fields if getattr(self, name) is not None]
        return fields + list(self.model_extra or {})

    def values(self) -> list[Any]:
        """The document's values, in :meth:`keys` order."""
        return [self[key] for key in self.keys()]

    def items(self) -> Iterator[tuple[str, Any]]:
        """``(key, value)`` pairs of the document, in :meth:`keys` order."""
        return ((key, self[key]) for key in self.keys())

    def raise_for_status(self) -> ClientResult:
        """Return ``self`` if the rollout succeeded, else raise the error of its status.

        Raises:
            AgentError: status ``agent_error``.
            RolloutTimeoutError: status ``timed_out``.
            RolloutCancelledError: status ``cancelled``.
            DispatchFailedError: status ``dispatch_failed``.
        """
        error_type = _STATUS_ERRORS.get(self.status)
        if error_type is None:
            return self
        detail = self.error.message if self.error else self.stop_reason
        raise error_type(f"rollout {self.session_id} ended {self.status.value}: {detail}", result=self)
