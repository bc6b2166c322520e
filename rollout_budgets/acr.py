"""The AgentCore Runtime data plane as the functions use it: every call spends a TPS budget slot.

The wait for the slot happens in botocore's ``before-send`` hook, after the request is serialized and
signed, so the time between the slot check and the bytes leaving is as short as it can be (a large
payload or a busy interpreter cannot push a send into the next slot's window).

Stops come before new invokes: an invoke takes only a slot that starts within ``invoke_horizon_s`` (1 s),
a stop any slot within ``max_wait_s`` (5 s). Slots go out in order, so a stop waits behind at most a second
of invokes, and while stops wait beyond that, invokes get no slot. A backlog of new rollouts can then
never starve the stops that free the sessions it waits for. An invoke that finds no slot in reach sleeps
until one is (up to ``invoke_wait_s``, 5 s) rather than going back to its queue at once: a requeue costs
at least a second of SQS visibility and several writes, which left most of the budget unused under a
backlog.

Errors become :class:`~rollout_budgets.errors.RetryableAcrError` (``RETRYABLE_ERROR_CODES``, any 5xx, and
transport failures) or :class:`~rollout_budgets.errors.FinalAcrError`. The client must not retry by itself
(``ClientFactory.client(..., single_attempt=True)``): a hidden retry would be an invoke outside the budget.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from contextlib import closing
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from rollout_budgets.errors import AcrCallError, FinalAcrError, NoTokenError, RetryableAcrError
from rollout_budgets.tps import TpsBudget
from rollout_contract.aws import error_code, error_message, http_status
from rollout_contract.protocol import RESOURCE_NOT_FOUND, RETRYABLE_ERROR_CODES

if TYPE_CHECKING:
    from types_boto3_bedrock_agentcore import BedrockAgentCoreClient
    from types_boto3_dynamodb import DynamoDBClient

_CONTENT_TYPE = "application/json"
_SERVICE_ID = "bedrock-agentcore"
_OPERATIONS = ("InvokeAgentRuntime", "StopRuntimeSession")
#: How far ahead an invoke may reserve its slot (stops may reserve up to the caller's ``max_wait_s``).
INVOKE_HORIZON_S = 1.0
#: How long an invoke may wait in the function for a slot to come within its horizon before it is requeued.
INVOKE_WAIT_S = 5.0
#: The slot the current thread's ACR call must wait for: (budget, slot start, horizon of a new slot if it is
#: missed, how long to wait for that one to come within the horizon).
_pending_slot: ContextVar[tuple[TpsBudget, float, float, float] | None] = ContextVar(
    "rollouts_pending_slot", default=None
)


def _wait_for_slot(**_: Any) -> None:
    """botocore ``before-send`` hook: hold the request until its reserved slot starts."""
    pending = _pending_slot.get()
    if pending is not None:
        tps, slot_start, max_wait_s, wait_s = pending
        tps.wait_for(slot_start, max_wait_s=max_wait_s, wait_s=wait_s)


class Acr:
    """Invoke and stop sessions of one runtime endpoint, within its TPS budget (one per endpoint)."""

    def __init__(
        self,
        client: BedrockAgentCoreClient,
        *,
        tps: TpsBudget,
        runtime_arn: str,
        qualifier: str,
        max_wait_s: float,
        invoke_horizon_s: float = INVOKE_HORIZON_S,
        invoke_wait_s: float = INVOKE_WAIT_S,
    ) -> None:
        self._client = client
        self.tps = tps
        for operation in _OPERATIONS:
            client.meta.events.register(
                f"before-send.{_SERVICE_ID}.{operation}", _wait_for_slot, unique_id=f"{__name__}.{operation}"
            )
        #: The endpoint this instance calls (its invoke budget is this endpoint's).
        self.qualifier = qualifier
        self._target = {"agentRuntimeArn": runtime_arn, "qualifier": qualifier}
        #: Longest wait for a slot: stops reserve this far ahead.
        self.max_wait_s = max_wait_s
        #: Invokes reserve only this far ahead, so stops keep precedence (see the module docstring).
        self.invoke_horizon_s = min(invoke_horizon_s, max_wait_s)
        #: How long an invoke waits for a slot within its horizon before giving up.
        self.invoke_wait_s = invoke_wait_s

    def reserve_invoke(self) -> float:
        """Reserve an invoke slot within ``invoke_horizon_s``, waiting up to ``invoke_wait_s``; return its start.

        Raises:
            NoTokenError: no slot came within reach in ``invoke_wait_s`` (stops or other invokes hold them).
        """
        return self.tps.reserve_waiting(horizon_s=self.invoke_horizon_s, wait_s=self.invoke_wait_s)

    @staticmethod
    def encode(payload: dict[str, Any]) -> bytes:
        """Encode an agent payload as the request body."""
        return json.dumps(payload, separators=(",", ":")).encode()

    def invoke(self, session_id: str, body: bytes, *, slot_start: float) -> bytes:
        """Invoke ``session_id`` with ``body`` in the slot reserved at ``slot_start`` (:meth:`reserve_invoke`).

        Returns the agent's answer (a rollout's is ``{"status": "processing", ...}``).

        Raises:
            NoTokenError: the slot passed and no other frees up within the wait allowed.
            RetryableAcrError: the invoke may succeed later.
            FinalAcrError: it cannot.
        """
        token = _pending_slot.set((self.tps, slot_start, self.invoke_horizon_s, self.invoke_wait_s))
        try:
            response = self._client.invoke_agent_runtime(
                **self._target,
                runtimeSessionId=session_id,
                payload=body,
                contentType=_CONTENT_TYPE,
                accept=_CONTENT_TYPE,
            )
            with closing(response["response"]) as stream:
                answer: bytes = stream.read()
        except (ClientError, BotoCoreError) as exc:
            raise classify(exc) from exc
        finally:
            _pending_slot.reset(token)
        return answer

    def reserve_stop(self) -> float:
        """Reserve a stop's slot (any within ``max_wait_s``: ahead of every invoke not yet reserved); its start.

        Raises:
            NoTokenError: every slot within ``max_wait_s`` is taken.
        """
        return self.tps.reserve(horizon_s=self.max_wait_s)

    def stop(self, session_id: str, *, slot_start: float | None = None) -> bool:
        """Stop ``session_id`` in the slot reserved at ``slot_start`` (:meth:`reserve_stop`; ``None``: reserve now).

        Returns ``False`` when ACR has no such session (never started, or already gone).

        Raises:
            NoTokenError: no budget slot frees up within the wait allowed.
            RetryableAcrError: the stop may succeed later.
            FinalAcrError: it cannot.
        """
        start = self.reserve_stop() if slot_start is None else slot_start
        token = _pending_slot.set((self.tps, start, self.max_wait_s, 0.0))
        try:
            self._client.stop_runtime_session(**self._target, runtimeSessionId=session_id)
        except (ClientError, BotoCoreError) as exc:
            error = classify(exc)
            if error.code == RESOURCE_NOT_FOUND.code:
                return False
            raise error from exc
        finally:
            _pending_slot.reset(token)
        return True


def endpoint_acrs(
    agentcore: BedrockAgentCoreClient,
    dynamodb: DynamoDBClient,
    *,
    budget_table: str,
    runtime_arn: str,
    qualifiers: Sequence[str],
    tps_limit: float,
    max_wait_s: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> tuple[Acr, ...]:
    """One :class:`Acr` per endpoint of a runtime (``qualifiers``), each with its own invoke budget."""
    return tuple(
        Acr(
            agentcore,
            tps=TpsBudget(
                dynamodb,
                table=budget_table,
                runtime_arn=runtime_arn,
                qualifier=qualifier,
                limit=tps_limit,
                clock=clock,
                sleep=sleep,
            ),
            runtime_arn=runtime_arn,
            qualifier=qualifier,
            max_wait_s=max_wait_s,
        )
        for qualifier in qualifiers
    )


def reserve_soonest(
    acrs: Sequence[Acr], *, clock: Callable[[], float], sleep: Callable[[float], None]
) -> tuple[Acr, float]:
    """An invoke slot on whichever of a runtime's endpoints has one soonest; returns the endpoint and the slot's start.

    With several endpoints, each try takes them in turn without waiting, the one whose next slot this process saw
    soonest first (a slot it holds comes first); while none has a slot within the invoke horizon, the caller sleeps
    until the first one seen comes within it and tries them all again, up to the invoke wait (waiting on one
    endpoint, a slot another caller took there kept the caller waiting while the others' slots passed unused, and
    the slots its process held on them expired: D98). One endpoint waits as :meth:`Acr.reserve_invoke` does.

    Raises:
        NoTokenError: no slot came within reach in the invoke wait.
    """
    if len(acrs) == 1:
        return acrs[0], acrs[0].reserve_invoke()
    give_up_at = clock() + max(acr.invoke_wait_s for acr in acrs)
    while True:
        soonest = math.inf
        for acr in sorted(acrs, key=lambda acr: acr.tps.next_free_seen):
            try:
                return acr, acr.tps.reserve(horizon_s=acr.invoke_horizon_s)
            except NoTokenError as exc:
                soonest = min(soonest, exc.retry_after_s)
        if clock() + soonest > give_up_at:
            raise NoTokenError(retry_after_s=soonest)
        sleep(soonest)


def classify(exc: ClientError | BotoCoreError) -> AcrCallError:
    """Turn a botocore failure into a retryable or final ACR error."""
    if isinstance(exc, BotoCoreError):
        return RetryableAcrError(type(exc).__name__, 0, str(exc))
    code, status = error_code(exc) or "Unknown", http_status(exc)
    retryable = code in RETRYABLE_ERROR_CODES or status >= 500
    return (RetryableAcrError if retryable else FinalAcrError)(code, status, error_message(exc))
