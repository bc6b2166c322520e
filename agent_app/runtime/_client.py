"""``AgentCoreHttpClient``: invoke an HTTP agent on AgentCore Runtime from asyncio, and handles to its invocations.

A foreground ``invoke`` returns the agent's result. A background one returns an :class:`InvocationHandle` whose
``result()`` polls the agent's state (``get``) every :data:`POLL_INTERVAL_S`. An agent that does not speak the
envelope (a plain ``BedrockAgentCoreApp``) answers with its result directly; the handle is then complete at
once. Streaming answers are not supported.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from agent_app.runtime._protocol import ENVELOPE_KEY, InvocationRequest, InvocationState, checked_state, state
from rollout_contract.aws import ClientFactory
from rollout_contract.protocol import region_of_arn

__all__ = ["AgentCoreHttpClient", "InvocationError", "InvocationHandle"]

#: Seconds between two state reads of a background invocation (ART's).
POLL_INTERVAL_S = 10.0


class RateLimiter(Protocol):
    """What gates the client's requests (ART's ``RateLimiter``: an awaitable ``wait_async``)."""

    async def wait_async(self) -> None:
        """Return when the next request may go."""


class InvocationError(RuntimeError):
    """An invocation failed, was interrupted (its process went away), or is not known to the agent."""

    def __init__(self, session_id: str, snapshot: InvocationState) -> None:
        self.session_id = session_id
        self.invocation_id = snapshot["invocation_id"]
        self.snapshot = snapshot
        super().__init__(f"Invocation {self.invocation_id}: {snapshot.get('error', snapshot['status'])}")


class InvocationHandle:
    """One invocation, by session and id; ``result(timeout)`` bounds the local wait only.

    A handle from :meth:`AgentCoreHttpClient.get_invocation` can be rebuilt after the process that started
    the invocation is gone (the agent records its invocations).
    """

    def __init__(
        self,
        client: AgentCoreHttpClient,
        session_id: str,
        invocation_id: str,
        snapshot: InvocationState | None = None,
    ) -> None:
        self.client = client
        self.session_id = session_id
        self.invocation_id = invocation_id
        self._snapshot = snapshot

    async def status(self) -> InvocationState:
        """The invocation's state (read from the agent unless it is known to be completed)."""
        if self._snapshot is None or self._snapshot["status"] != "completed":
            request = InvocationRequest("get", self.invocation_id)
            answer = await self.client._request(self.session_id, {ENVELOPE_KEY: request.envelope()})
            self._snapshot = checked_state(answer, self.invocation_id)
        return self._snapshot

    async def result(self, timeout: float | None = None) -> Any:
        """Wait for the invocation's JSON result.

        Raises:
            InvocationError: it failed, was interrupted or is not found.
            TimeoutError: ``timeout`` passed first (the invocation goes on).
        """
        async with asyncio.timeout(timeout):
            snapshot = self._snapshot or await self.status()
            while snapshot["status"] == "in_progress":
                await asyncio.sleep(POLL_INTERVAL_S)
                snapshot = await self.status()
        if snapshot["status"] == "completed" and "result" in snapshot:
            return snapshot["result"]
        raise InvocationError(self.session_id, snapshot)


class AgentCoreHttpClient:
    """Invoke one runtime's HTTP agents from asyncio (ART 0.2.0's ``AgentCoreHttpClient``).

    The caller owns session ids and the agent's configuration (put it in the payload's ``_config``). Requests
    go through a ``bedrock-agentcore`` client in the runtime's region (its ``AWS_ENDPOINT_URL_BEDROCK_AGENTCORE``
    honoured); boto3's calls run in worker threads. ``aws_client`` supplies an open client owned elsewhere
    instead: an async one (aiobotocore's, as ART passes) or a boto3 one.
    """

    def __init__(
        self,
        runtime_arn: str,
        *,
        max_pool_connections: int = 100,
        read_timeout: float = 900,
        request_rate_limiter: RateLimiter | None = None,
        aws_client: Callable[[], Awaitable[Any]] | None = None,
    ) -> None:
        """Create the client; nothing connects before the first request.

        Args:
            runtime_arn: the runtime's ARN (its region is the client's).
            max_pool_connections: connections kept to the service.
            read_timeout: seconds a foreground invocation may take to answer.
            request_rate_limiter: awaited before every invoke, get and stop.
            aws_client: returns an open ``bedrock-agentcore`` client to use instead of one of ours.
        """
        self.runtime_arn = runtime_arn
        self._factory = ClientFactory(
            region=region_of_arn(runtime_arn), max_pool_connections=max_pool_connections, read_timeout_s=read_timeout
        )
        self._rate_limiter = request_rate_limiter
        self._provider = aws_client
        self._own_client: Any = None

    async def __aenter__(self) -> AgentCoreHttpClient:
        await self._aws()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Release this client's connections (a client given as ``aws_client`` stays open)."""
        if self._own_client is not None:
            client, self._own_client = self._own_client, None
            await asyncio.to_thread(client.close)

    async def invoke(
        self, payload: dict[str, Any], *, session_id: str, invocation_id: str | None = None, background: bool = False
    ) -> Any:
        """Start an invocation: its result (foreground) or its :class:`InvocationHandle` (``background=True``).

        Keep ``invocation_id`` to retry or reattach after a lost answer: the agent never starts an id twice.

        Raises:
            ValueError: the payload holds the envelope key itself, or the id is invalid.
            InvocationError: a foreground invocation failed.
            RuntimeError: the service answered with an HTTP status other than 200.
        """
        request = InvocationRequest("start", invocation_id or uuid.uuid4().hex, background)
        InvocationRequest.parse(request.envelope())
        if ENVELOPE_KEY in payload:
            raise ValueError(f"{ENVELOPE_KEY} is reserved for the client's envelope; remove it from the payload")
        answer = await self._request(session_id, {**payload, ENVELOPE_KEY: request.envelope()})
        if (
            isinstance(answer, dict)
            and {"version", "status", "invocation_id"} <= answer.keys()
            and (answer["invocation_id"] == request.invocation_id)
        ):
            snapshot = checked_state(answer, request.invocation_id)
        else:  # an agent without the envelope answered with its result
            snapshot = {**state(request.invocation_id, "completed"), "result": answer}
        handle = InvocationHandle(self, session_id, request.invocation_id, snapshot)
        return handle if background else await handle.result()

    def get_invocation(self, *, session_id: str, invocation_id: str) -> InvocationHandle:
        """A handle to an invocation started earlier (no request is made).

        Raises:
            ValueError: an invalid id.
        """
        InvocationRequest.parse(InvocationRequest("get", invocation_id).envelope())
        return InvocationHandle(self, session_id, invocation_id)

    async def stop_session(self, session_id: str) -> None:
        """Stop the runtime session."""
        await self._call("stop_runtime_session", agentRuntimeArn=self.runtime_arn, runtimeSessionId=session_id)

    async def _request(self, session_id: str, payload: dict[str, Any]) -> Any:
        response = await self._call(
            "invoke_agent_runtime",
            agentRuntimeArn=self.runtime_arn,
            runtimeSessionId=session_id,
            contentType="application/json",
            accept="application/json",
            payload=json.dumps(payload, allow_nan=False).encode(),
        )
        raw = response.pop("_body")
        if response.get("statusCode", 200) != 200:
            raise RuntimeError(f"InvokeAgentRuntime returned HTTP {response['statusCode']}: {raw.decode()}")
        return json.loads(raw)

    async def _call(self, operation: str, **kwargs: Any) -> dict[str, Any]:
        """One service call (rate limited), an invoke's body read into ``_body``."""
        client = await self._aws()
        if self._rate_limiter is not None:
            await self._rate_limiter.wait_async()
        method = getattr(client, operation)
        if not inspect.iscoroutinefunction(method):
            return await asyncio.to_thread(_call_sync, method, kwargs)
        response: dict[str, Any] = await method(**kwargs)
        if "response" in response:
            async with response["response"] as stream:
                response["_body"] = await stream.read()
        return response

    async def _aws(self) -> Any:
        if self._provider is not None:
            return await self._provider()
        if self._own_client is None:
            self._own_client = self._factory.client("bedrock-agentcore")
        return self._own_client


def _call_sync(method: Callable[..., dict[str, Any]], kwargs: dict[str, Any]) -> dict[str, Any]:
    response = method(**kwargs)
    if "response" in response:
        with response["response"] as stream:
            response["_body"] = stream.read()
    return response
