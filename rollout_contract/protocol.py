"""AgentCore Runtime facts every component relies on: headers, ping states, errors, quotas."""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple

SESSION_HEADER = "X-Amzn-Bedrock-AgentCore-Runtime-Session-Id"
REQUEST_ID_HEADER = "X-Amzn-Bedrock-AgentCore-Runtime-Request-Id"
ERROR_TYPE_HEADER = "x-amzn-ErrorType"
DEFAULT_QUALIFIER = "DEFAULT"
USER_ID_HEADER = "X-Amzn-Bedrock-AgentCore-Runtime-User-Id"
#: Prefix of custom headers ACR passes to the agent (when allowlisted on the runtime).
CUSTOM_HEADER_PREFIX = "X-Amzn-Bedrock-AgentCore-Runtime-Custom-"
#: Trace headers ACR passes through to the agent.
TRACE_HEADERS = ("X-Amzn-Trace-Id", "traceparent", "tracestate", "baggage")

#: InvokeAgentRuntime's payload limit: the API model's 100,000,000 bytes (decimal, not 100 MiB).
MAX_PAYLOAD_BYTES = 100_000_000
DEFAULT_INVOKE_TPS = 25
DEFAULT_ACTIVE_SESSION_QUOTA = 1000
DEFAULT_IDLE_TIMEOUT_S = 900
DEFAULT_MAX_LIFETIME_S = 28_800
STARTUP_LIMIT_S = 60
#: Longest a synchronous InvokeAgentRuntime request may run.
SYNC_INVOKE_LIMIT_S = 900
#: Endpoints an agent runtime may have (ACR's quota; invocations per second are counted per endpoint).
MAX_RUNTIME_ENDPOINTS = 10
#: Name prefix of the endpoints an experiment adds to its runtime's own (``endpoint_1``, ``endpoint_2``, ...).
ENDPOINT_NAME_PREFIX = "endpoint_"


def endpoint_qualifiers(first: str, count: int) -> tuple[str, ...]:
    """The qualifiers of an experiment's ``count`` runtime endpoints: ``first`` (the runtime's own, ``DEFAULT``),
    then the ones the experiment creates, ``endpoint_1`` to ``endpoint_{count - 1}``.

    Raises:
        ValueError: ``count`` is not within 1 and :data:`MAX_RUNTIME_ENDPOINTS`.
    """
    if not 1 <= count <= MAX_RUNTIME_ENDPOINTS:
        raise ValueError(f"an agent runtime has 1 to {MAX_RUNTIME_ENDPOINTS} endpoints, not {count}")
    return (first, *(f"{ENDPOINT_NAME_PREFIX}{index}" for index in range(1, count)))


class PingStatus(StrEnum):
    """What an agent's ``GET /ping`` reports."""

    HEALTHY = "Healthy"
    HEALTHY_BUSY = "HealthyBusy"


class AcrError(NamedTuple):
    """An ACR data-plane error: its ``x-amzn-ErrorType`` code and HTTP status."""

    code: str
    http_status: int


VALIDATION = AcrError("ValidationException", 400)
UNAUTHORIZED = AcrError("UnauthorizedException", 401)
SERVICE_QUOTA_EXCEEDED = AcrError("ServiceQuotaExceededException", 402)
ACCESS_DENIED = AcrError("AccessDeniedException", 403)
RESOURCE_NOT_FOUND = AcrError("ResourceNotFoundException", 404)
RETRYABLE_CONFLICT = AcrError("RetryableConflictException", 409)
RUNTIME_CLIENT_ERROR = AcrError("RuntimeClientError", 424)
THROTTLING = AcrError("ThrottlingException", 429)
INTERNAL_SERVER = AcrError("InternalServerException", 500)

#: A runtime's control-plane status (``GetAgentRuntime``) when it can take invocations.
RUNTIME_READY = "READY"


def runtime_id(runtime_arn: str) -> str:
    """The runtime id the control plane takes: the part after ``runtime/`` in the runtime's ARN."""
    prefix, marker, runtime = runtime_arn.partition(":runtime/")
    if not marker or not prefix.startswith("arn:") or not runtime or "/" in runtime:
        raise ValueError(f"{runtime_arn!r} is not an AgentCore runtime ARN (arn:...:runtime/<id>)")
    return runtime


#: Error codes a dispatcher retries with backoff; every other code ends the rollout.
RETRYABLE_ERROR_CODES = frozenset(
    e.code for e in (SERVICE_QUOTA_EXCEEDED, RETRYABLE_CONFLICT, RUNTIME_CLIENT_ERROR, THROTTLING, INTERNAL_SERVER)
)


def region_of_arn(arn: str) -> str | None:
    """The region field of an ARN (``arn:aws:bedrock-agentcore:us-west-2:...`` -> ``us-west-2``), as ART reads it.

    ``None`` when ``arn`` is not an ARN with a region.
    """
    parts = arn.split(":")
    return parts[3] if len(parts) >= 6 and parts[0] == "arn" and parts[3] else None
