"""What a trainer gets back: the stored result, its token traces, and ``raise_for_status``."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from rollout_contract import RolloutResult, Status
from trainer_client._exceptions import (
    AgentError,
    DispatchFailedError,
    RolloutCancelledError,
    RolloutError,
    RolloutTimeoutError,
)
from trainer_client.routing import RoutedExperts

__all__ = ["ClientResult", "TokenTrace"]

_STATUS_ERRORS: dict[Status, type[RolloutError]] = {
    Status.AGENT_ERROR: AgentError,
    Status.TIMED_OUT: RolloutTimeoutError,
    Status.CANCELLED: RolloutCancelledError,
    Status.DISPATCH_FAILED: DispatchFailedError,
}


class TokenTrace(BaseModel):
    """One model call the token gateway recorded for a session (choice 0 only, as the gateway keeps it).

    ``weight_version`` is the policy version that served the call (the server's own stamp, else the one the trainer
    last told the gateway); ``routed_experts`` its per-token MoE routing, aligned to ``prompt_token_ids +
    completion_token_ids`` (``None`` when the server returned none). ``trainer_client.gateway`` keeps both in the
    record's ``metadata``; rLLM's gateway at HEAD has them at the top (``weight_version``, ``routing_matrices``):
    both are read.
    """

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
    weight_version: int | None = None
    routed_experts: RoutedExperts | None = None

    @model_validator(mode="before")
    @classmethod
    def _lift_gateway_fields(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        found = data.get("metadata")
        metadata: dict[str, Any] = found if isinstance(found, dict) else {}
        lifted = dict(data)
        if lifted.get("weight_version") is None and metadata.get("weight_version") is not None:
            lifted["weight_version"] = metadata["weight_version"]
        if lifted.get("routed_experts") is None:
            if metadata.get("routed_experts") is not None:
                lifted["routed_experts"] = metadata["routed_experts"]
            elif data.get("routing_matrices"):
                lifted["routed_experts"] = RoutedExperts.from_routing_matrices(data["routing_matrices"])
        return lifted


class ClientResult(RolloutResult):
    """A rollout's terminal result as the trainer sees it.

    A ``dict`` holding the stored JSON document, as ART's results are (``result["rewards"]``,
    ``json.dumps(result)``, ``result == {...}``), with the typed views of
    :class:`rollout_contract.RolloutResult` (``status``, ``reward``, ``error``, ``timings``, ...) and
    ``token_traces``: the token ids and logprobs the gateway recorded for the session (``None`` when the
    client has no gateway, ``[]`` when it recorded no call), an attribute, not a key of the document.
    """

    token_traces: list[TokenTrace] | None = None

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
