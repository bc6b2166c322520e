"""A sandbox's session slot and invoke tokens, taken with the budget code the experiment's functions use (D70, D94).

Sandbox calls are synchronous (a command's result is the invoke's answer), so they cannot ride the dispatch
queue; the trainer takes what a dispatcher would, with the same code on the same DynamoDB items: the slot with
``rollout_budgets.ledger.Ledger`` (one transaction that records the sandbox in the sessions table and counts it in
the account-wide session budget; its deadline is then the sweeper's business), each call's token with
``rollout_budgets.tps.TpsBudget`` through ``rollout_budgets.acr.Acr`` (invokes reserve at most 1 s ahead, so the
functions' stops keep precedence). With several runtime endpoints (``-c endpoints=K``) a sandbox's first call goes
to the endpoint whose slot is soonest and every later call, its stop included, to that one, as the dispatcher does a
rollout's. The trainer role's grants for this are scoped to sandbox keys and the budget items the functions use
(``infra/trainer_access.py``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from rollout_budgets.acr import Acr, classify, endpoint_acrs, reserve_soonest
from rollout_budgets.errors import AcrCallError, NoTokenError, RetryableAcrError
from rollout_budgets.ledger import Admission, Ledger, Transition
from rollout_budgets.slot_wait import SlotWaiter
from rollout_contract.keys import ResultKey
from rollout_contract.protocol import RETRYABLE_ERROR_CODES, endpoint_qualifiers
from rollout_contract.results import Status
from rollout_contract.retry import RetryPolicy
from trainer_client.sandbox._types import SandboxCapacityError, SandboxError, SandboxProtocolError

if TYPE_CHECKING:
    from types_boto3_bedrock_agentcore import BedrockAgentCoreClient
    from types_boto3_dynamodb import DynamoDBClient

    from rollout_contract import ExperimentDescriptor

__all__ = ["DirectCalls", "SandboxBudget", "SandboxStart", "StillRunning"]

logger = logging.getLogger("trainer_client.sandbox")

#: Longest wait for a stop's token (stops may reserve this far ahead, as the functions' do).
STOP_TOKEN_WAIT_S = 5.0
#: Attempts (default) of one call that fails in a way that may pass (throttled, a cold start's 424, 5xx, no connection):
#: every sandbox request is idempotent (a command is addressed by its invocation id), so a retry is safe.
CALL_ATTEMPTS = 5
#: Waits between a call's attempts (each attempt spends its own invoke token, so botocore makes one).
_BACKOFF_BASE_S, _BACKOFF_MAX_S = 1.0, 8.0
#: botocore's error when a call's answer did not come within the client's read timeout: the command still runs.
_READ_TIMEOUT = "ReadTimeoutError"


class StillRunning(Exception):
    """A waiting call ended before its command did (the client's read timeout, or ACR's 15-minute limit)."""


@dataclass(frozen=True)
class SandboxStart:
    """What the sessions table records when a sandbox takes its slot (``rollout_budgets.ledger.Ledger.start``'s
    arguments)."""

    exp_id: str
    input_id: str
    session_id: str
    trainer: str
    submitted_at: float
    #: The latest deadline (start limit + lifetime), until the started sandbox's own replaces it.
    deadline_at: float

    @property
    def key(self) -> ResultKey:
        """The ids of the sandbox's sessions-table item."""
        return ResultKey(self.exp_id, self.input_id, self.session_id)


class SandboxBudget:
    """The slot, tokens and session calls of one sandbox experiment, for one client (thread-safe)."""

    def __init__(
        self,
        descriptor: ExperimentDescriptor,
        *,
        agentcore: BedrockAgentCoreClient,
        dynamodb: DynamoDBClient,
        trainer_id: str,
        attempts: int = CALL_ATTEMPTS,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.trainer_id = trainer_id
        self._retry = _call_retry(attempts)
        self._clock, self._sleep = clock, sleep
        self.ledger = Ledger(
            dynamodb,
            sessions_table=descriptor.sessions_table,
            budget_table=descriptor.budget_table,
            exp_id=descriptor.exp_id,
            session_budget=descriptor.session_budget,
            sleep=sleep,
        )
        #: One per endpoint of the runtime (``-c endpoints=K``), each with its own invoke budget, as the functions'.
        self.acrs = endpoint_acrs(
            agentcore,
            dynamodb,
            budget_table=descriptor.budget_table,
            runtime_arn=descriptor.runtime_arn,
            qualifiers=endpoint_qualifiers(descriptor.runtime_qualifier, descriptor.runtime_endpoints),
            tps_limit=descriptor.tps_limit,
            max_wait_s=STOP_TOKEN_WAIT_S,
            clock=clock,
            sleep=sleep,
        )
        #: Each sandbox's endpoint: its first call goes where a slot is soonest, every later call there.
        self._endpoints: dict[str, Acr] = {}
        self._endpoints_lock = threading.Lock()
        self.slots = SlotWaiter(self.ledger.free_slots, clock=clock, sleep=sleep)

    def admit(self, start: SandboxStart, *, until: float) -> None:
        """Record the sandbox and take its session slot, waiting for one until ``until`` (unix s).

        Raises:
            SandboxCapacityError: no slot came free in time.
            SandboxError: the session id was used before.
        """
        while True:
            started = self.ledger.start(
                start.key,
                submitted_at=start.submitted_at,
                deadline_at=start.deadline_at,
                trainer=start.trainer,
                owner=self.trainer_id,
                lease_until=start.deadline_at,
            )
            if started.admission is Admission.ADMITTED:
                return
            if started.admission is Admission.STATE_CHANGED:
                raise SandboxError(
                    f"session id {start.session_id} was used before; start the sandbox under a new one (or none)"
                )
            if not self.slots.wait(until):
                raise SandboxCapacityError(
                    "no session slot came free within the queue timeout: every slot of the account's session budget "
                    "is held (rollouts and sandboxes of every experiment); terminate sandboxes you no longer need, "
                    "or give SandboxClient a longer queue_timeout"
                )

    def mark_running(self, session_id: str, *, started_at: float, deadline_at: float) -> bool:
        """Give the started sandbox its deadline; ``False`` when it ended meanwhile (the sweeper stopped it)."""
        return self.ledger.mark_running(
            session_id,
            owner=self.trainer_id,
            dispatched_at=started_at,
            deadline_at=deadline_at,
            endpoint=self.endpoint(session_id).qualifier,
        )

    def call(self, session_id: str, payload: dict[str, Any]) -> dict[str, Any]:
        """Invoke the sandbox with ``payload`` under the invoke budget; its JSON answer.

        Raises:
            StillRunning: the answer did not come within the client's read timeout (a command still runs).
            AcrCallError: the call failed for good, or kept failing (``RetryableAcrError``).
            SandboxProtocolError: the answer is not a JSON object.
        """
        body = Acr.encode(payload)

        def attempt() -> bytes:
            try:
                return self._invoke(session_id, body)
            except RetryableAcrError as exc:
                if exc.code == _READ_TIMEOUT:
                    raise StillRunning(str(exc)) from exc
                raise

        raw = self._retry.call(attempt, retry_on=_transient, sleep=self._sleep)
        try:
            answer = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise SandboxProtocolError(
                f"the runtime's answer is not JSON (is the sandbox image deployed?): {raw[:500]!r}"
            ) from None
        if not isinstance(answer, dict):
            raise SandboxProtocolError(f"the runtime's answer is not a JSON object: {raw[:500]!r}")
        return answer

    def terminate(self, start_key: ResultKey) -> None:
        """Stop the sandbox's session and free its slot; when the stop fails, the next sweep stops it (never raises)."""
        try:
            self._forget(start_key.session_id).stop(start_key.session_id)
        except (AcrCallError, NoTokenError) as exc:
            logger.warning(
                "could not stop sandbox %s (%s); its deadline is now, so the sweeper stops it on its next run",
                start_key.session_id,
                exc,
            )
            self.ledger.expire(start_key.session_id, now=self._clock())
            return
        transition = self.ledger.finish(start_key, status=Status.SUCCEEDED, finished_at=self._clock())
        if transition is Transition.ALREADY_FINISHED:
            logger.info("sandbox %s was already finished (its deadline passed)", start_key.session_id)

    def abandon(self, start_key: ResultKey) -> None:
        """End a sandbox whose start failed: stop whatever started and free the slot (never raises)."""
        try:
            self._forget(start_key.session_id).stop(start_key.session_id)
        except (AcrCallError, NoTokenError) as exc:
            logger.warning("could not stop the failed sandbox %s: %s", start_key.session_id, exc)
        self.ledger.finish(start_key, status=Status.DISPATCH_FAILED, finished_at=self._clock())

    def _invoke(self, session_id: str, body: bytes) -> bytes:
        """Invoke in a reserved slot, waiting as long as the budget needs (an invoke reserves 1 s ahead at most,
        so the functions' stops keep precedence)."""
        while True:
            try:
                acr, slot_start = self._reserve_invoke(session_id)
                return acr.invoke(session_id, body, slot_start=slot_start)
            except NoTokenError as exc:
                self._sleep(exc.retry_after_s)

    def endpoint(self, session_id: str) -> Acr:
        """The endpoint sandbox ``session_id`` runs on: the one its first call went to, or (a sandbox this client
        did not start) the one its sessions-table item records; the runtime's own when none is known."""
        return self._known(session_id) or self._remember(session_id, self.acrs[0])

    def _known(self, session_id: str) -> Acr | None:
        """The endpoint this client sent the sandbox's calls to, else the one its item records (one read)."""
        with self._endpoints_lock:
            known = self._endpoints.get(session_id)
        if known is not None or len(self.acrs) == 1:
            return known or self.acrs[0]
        record = self.ledger.get(session_id)
        qualifier = record.endpoint if record is not None else None
        recorded = next((acr for acr in self.acrs if acr.qualifier == qualifier), None)
        return None if recorded is None else self._remember(session_id, recorded)

    def _remember(self, session_id: str, acr: Acr) -> Acr:
        with self._endpoints_lock:
            return self._endpoints.setdefault(session_id, acr)

    def _forget(self, session_id: str) -> Acr:
        """The sandbox's endpoint, no longer kept (it is being stopped)."""
        acr = self.endpoint(session_id)
        with self._endpoints_lock:
            self._endpoints.pop(session_id, None)
        return acr

    def _reserve_invoke(self, session_id: str) -> tuple[Acr, float]:
        """A slot for one of the sandbox's calls: on its endpoint, or, for a sandbox being started (no endpoint
        known yet), on the endpoint that has one soonest, which it then keeps (as the dispatcher does a rollout)."""
        acr = self._known(session_id)
        if acr is not None:
            return acr, acr.reserve_invoke()
        acr, slot_start = reserve_soonest(self.acrs, clock=self._clock, sleep=self._sleep)
        self._remember(session_id, acr)
        return acr, slot_start


class DirectCalls(SandboxBudget):
    """The session calls of a sandbox on a runtime that is none of our experiments' (ART's case): no budgets.

    No session slot is taken and no invoke token spent (ACR's own quotas apply), nothing is recorded in a sessions
    table, and no sweeper stops a sandbox at its deadline: :meth:`terminate` (or leaving ``with``) is the only stop,
    as in ART. Calls are retried as :class:`SandboxBudget`'s are (throttled, a cold start, 5xx).
    """

    def __init__(
        self,
        agentcore: BedrockAgentCoreClient,
        *,
        runtime_arn: str,
        qualifier: str,
        attempts: int = CALL_ATTEMPTS,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._retry = _call_retry(attempts)
        self._agentcore = agentcore
        self._target = {"agentRuntimeArn": runtime_arn, "qualifier": qualifier}
        self._clock, self._sleep = clock, sleep

    def admit(self, start: SandboxStart, *, until: float) -> None:
        """Nothing to take: no session budget covers this runtime."""

    def mark_running(self, session_id: str, *, started_at: float, deadline_at: float) -> bool:
        """Nothing to record: no sweeper watches this runtime's sessions."""
        return True

    def terminate(self, start_key: ResultKey) -> None:
        """Stop the sandbox's session (never raises; a failure is logged, as nothing else will stop it)."""
        self._stop(start_key.session_id)

    def abandon(self, start_key: ResultKey) -> None:
        """Stop whatever a failed start started (never raises)."""
        self._stop(start_key.session_id)

    def _stop(self, session_id: str) -> None:
        try:
            self._agentcore.stop_runtime_session(runtimeSessionId=session_id, **self._target)
        except (ClientError, BotoCoreError) as exc:
            logger.warning("could not stop sandbox %s (%s); no sweeper stops it on this runtime", session_id, exc)

    def _invoke(self, session_id: str, body: bytes) -> bytes:
        try:
            response = self._agentcore.invoke_agent_runtime(
                runtimeSessionId=session_id,
                payload=body,
                contentType="application/json",
                accept="application/json",
                **self._target,
            )
            with closing(response["response"]) as stream:
                return bytes(stream.read())
        except (ClientError, BotoCoreError) as exc:
            raise classify(exc) from exc


def _call_retry(attempts: int) -> RetryPolicy:
    """How a sandbox's session calls are retried: ``attempts`` tries, backing off from 1 s to 8 s."""
    if attempts < 1:
        raise ValueError(f"max_retry_attempts must be at least 1, got {attempts}")
    return RetryPolicy(attempts=attempts, base_delay_s=_BACKOFF_BASE_S, max_delay_s=_BACKOFF_MAX_S)


def _transient(exc: Exception) -> bool:
    """Whether a failed call may pass on a retry soon: ACR's retryable codes, 5xx, no connection."""
    return isinstance(exc, RetryableAcrError) and (
        exc.code in RETRYABLE_ERROR_CODES or exc.http_status >= 500 or exc.http_status == 0
    )
