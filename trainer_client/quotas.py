"""The account's AgentCore Runtime quotas from Service Quotas, and what K runtime endpoints buy under them.

Service Quotas lists AgentCore under the service code ``bedrock-agentcore``. AWS's pages publish the quotas by name,
not by code, so they are found by name: the per-endpoint ``InvokeAgentRuntime`` rate, the account's active
sessions, the endpoints per agent. A quota Service Quotas does not list (a region where it lists no AgentCore
quota, or the local stack, which has no Service Quotas) is unknown, and ACR's published default stands in for it,
said so. ``rollouts preflight`` and ``rollouts doctor`` both print :func:`endpoints_buy`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from rollout_contract.aws import error_code
from rollout_contract.protocol import DEFAULT_ACTIVE_SESSION_QUOTA, DEFAULT_INVOKE_TPS, MAX_RUNTIME_ENDPOINTS

if TYPE_CHECKING:
    from types_boto3_service_quotas import ServiceQuotasClient
    from types_boto3_service_quotas.type_defs import ServiceQuotaTypeDef

__all__ = ["QUOTAS_SERVICE", "Quotas", "agentcore_quotas", "endpoints_buy", "shortfalls"]

#: AgentCore's service code in Service Quotas.
QUOTAS_SERVICE = "bedrock-agentcore"
#: Words each quota's name holds (lower case).
INVOKE_QUOTA_WORDS = "invokeagentruntime"
SESSION_QUOTA_WORDS = "active session"
ENDPOINT_QUOTA_WORDS = "endpoints per"


def agentcore_quotas(client: ServiceQuotasClient) -> list[ServiceQuotaTypeDef]:
    """The account's AgentCore quotas: AWS's defaults, overridden by those applied to the account; none when
    Service Quotas knows no AgentCore quota in the client's region."""
    try:
        defaults = client.get_paginator("list_aws_default_service_quotas").paginate(ServiceCode=QUOTAS_SERVICE)
        quotas = {quota["QuotaCode"]: quota for page in defaults for quota in page["Quotas"]}
        applied = client.get_paginator("list_service_quotas").paginate(ServiceCode=QUOTAS_SERVICE)
        quotas.update((quota["QuotaCode"], quota) for page in applied for quota in page["Quotas"])
    except ClientError as exc:
        if error_code(exc) != "NoSuchResourceException":
            raise
        return []
    return list(quotas.values())


@dataclass(frozen=True)
class Quotas:
    """The three quotas K endpoints depend on, each ``None`` when Service Quotas does not list it."""

    invoke_tps: ServiceQuotaTypeDef | None = None
    sessions: ServiceQuotaTypeDef | None = None
    endpoints: ServiceQuotaTypeDef | None = None

    @classmethod
    def find(cls, quotas: list[ServiceQuotaTypeDef]) -> Quotas:
        """The quotas of :func:`agentcore_quotas` found by name."""

        def named(words: str) -> ServiceQuotaTypeDef | None:
            return next((quota for quota in quotas if words in quota["QuotaName"].lower()), None)

        return cls(named(INVOKE_QUOTA_WORDS), named(SESSION_QUOTA_WORDS), named(ENDPOINT_QUOTA_WORDS))


def shortfalls(quotas: Quotas, *, session_budget: int, tps_limit: float) -> list[str]:
    """A line for each listed quota below the budget it must hold (the sessions, the invoke rate per endpoint)."""
    wanted = ((quotas.sessions, session_budget), (quotas.invoke_tps, tps_limit))
    return [
        f"{quota['QuotaName']} is {quota['Value']:g}, the budget {budget:g}"
        for quota, budget in wanted
        if quota is not None and quota["Value"] < budget
    ]


def endpoints_buy(quotas: Quotas, *, endpoints: int, session_budget: int, where: str) -> tuple[bool, str, str]:
    """Whether ``endpoints`` fit, the line saying what they buy, and what to check by hand ("" when all is known).

    Every rollout spends an invoke and a stop of its endpoint's rate, so K endpoints dispatch up to K x rate / 2
    rollouts/s; the session budget binds first for rollouts longer than ``2 x budget / (K x rate)`` seconds (they
    hold their sessions longer than the rate refills them), and then more endpoints buy nothing.
    """
    invoke, sessions, limit = quotas.invoke_tps, quotas.sessions, quotas.endpoints
    rate = invoke["Value"] if invoke else float(DEFAULT_INVOKE_TPS)
    most = min(int(limit["Value"]), MAX_RUNTIME_ENDPOINTS) if limit else MAX_RUNTIME_ENDPOINTS
    known = invoke["QuotaName"] if invoke else f"quota unknown ({where}): ACR's published default"
    account = (
        f"{sessions['QuotaName']} {sessions['Value']:g}"
        if sessions
        else f"active sessions unknown (ACR's published default {DEFAULT_ACTIVE_SESSION_QUOTA:,})"
    )
    detail = (
        f"{known}: {rate:g}/s per endpoint; every rollout spends an invoke and a stop, so endpoints={endpoints} "
        f"dispatches up to {endpoints * rate / 2:g} rollouts/s, each endpoint adding {rate / 2:g}/s, {most} endpoints "
        f"{most * rate / 2:g}/s; the session budget {session_budget} ({account}) binds first for rollouts longer "
        f"than {2 * session_budget / (endpoints * rate):.0f} s, and then more endpoints buy nothing"
    )
    if endpoints > most:
        return False, f"endpoints={endpoints} exceeds {most}; {detail}", f"give 1-{most}"
    unknown = [name for name, quota in (("invoke", invoke), ("active session", sessions)) if quota is None]
    check = f"check the {' and '.join(unknown)} quota on the Service Quotas page" if unknown else ""
    return True, detail, check
