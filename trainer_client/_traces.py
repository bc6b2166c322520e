"""Token traces from the gateway, joined to results on the session id."""

from __future__ import annotations

import logging
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from http import HTTPStatus
from typing import TYPE_CHECKING

from pydantic import TypeAdapter

from trainer_client._config import TraceSettings
from trainer_client._results import TokenTrace

if TYPE_CHECKING:
    import httpx

__all__ = ["CALLS_IN_FLIGHT_HEADER", "SERVED_VERSIONS_PATH", "SETTLED_TRACES_PATH", "TraceReader", "session_base_url"]

logger = logging.getLogger("trainer_client")
_TRACES = TypeAdapter(list[TokenTrace])
#: ``trainer_client.gateway``'s exact read of a session's traces (defined here: the reader imports no server code).
SETTLED_TRACES_PATH = "/sessions/{session_id}/traces/settled"
#: Its response header: the session's model calls still in flight when the read returned (``0``: complete).
CALLS_IN_FLIGHT_HEADER = "X-Calls-In-Flight"
#: ``trainer_client.gateway``'s read of the current weight version and the tokens each version served lately.
SERVED_VERSIONS_PATH = "/admin/served_versions"


def session_base_url(gateway_url: str, session_id: str) -> str:
    """The OpenAI-compatible base URL an agent uses so the gateway traces its calls under ``session_id``."""
    return f"{gateway_url.rstrip('/')}/sessions/{session_id}/v1"


class TraceReader:
    """Read a session's traces once its result exists.

    With ``trainer_client.gateway`` (the gateway the local stack runs) one read is exact: the gateway answers
    once the session has no model call in flight and every trace write has finished. A plain
    rllm-model-gateway has no such route (404): the reader then re-reads ``/traces`` until two reads in a row
    agree on the length, ``settings.attempts`` reads at most, and warns once that the join is a guess.
    """

    def __init__(
        self,
        gateway_url: str,
        settings: TraceSettings,
        *,
        transport: httpx.BaseTransport | None = None,
        workers: int = 8,
        auth: httpx.Auth | None = None,
    ):
        import httpx  # here: the `rollouts` commands import this module, and httpx takes 0.1-0.2 s to import

        self._url = gateway_url.rstrip("/")
        self._settings = settings
        self._http = httpx.Client(
            timeout=settings.timeout_s + settings.settle_s,
            transport=transport,
            limits=httpx.Limits(max_connections=workers, max_keepalive_connections=workers),
            auth=auth,
        )
        self._settled_route = True
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="rollouts-traces")

    def start(self, session_id: str) -> Future[list[TokenTrace] | None]:
        """Begin :meth:`read` in the background (the caller reads the result object meanwhile)."""
        return self._pool.submit(self.read, session_id)

    def read(self, session_id: str) -> list[TokenTrace] | None:
        """Return the session's traces in call order, or ``None`` if the gateway could not be read."""
        import httpx

        try:
            if self._settled_route:
                traces = self._read_settled(session_id)
                if traces is not None:
                    return traces
            return self._read_until_stable(session_id)
        except httpx.HTTPError as exc:
            logger.warning("token traces of session %s unavailable: %s", session_id, exc)
            return None

    def probe(self, model: str | None) -> TokenTrace | None:
        """Make one one-token model call through the gateway in a session of its own and return the trace the
        gateway recorded for it (``None`` if it recorded none).

        Raises:
            httpx.HTTPError: the call failed (no server behind the gateway, a model name it does not serve).
        """
        session_id = f"probe-{uuid.uuid4()}"
        body = {"model": model or "default", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
        url = session_base_url(self._url, session_id) + "/chat/completions"
        self._http.post(url, json=body).raise_for_status()
        traces = self.read(session_id)
        return traces[-1] if traces else None

    def _read_settled(self, session_id: str) -> list[TokenTrace] | None:
        response = self._http.get(
            self._url + SETTLED_TRACES_PATH.format(session_id=session_id), params={"timeout_s": self._settings.settle_s}
        )
        if response.status_code == HTTPStatus.NOT_FOUND:
            self._settled_route = False
            logger.warning(
                "the gateway at %s has no settled-traces route (a plain rllm-model-gateway?): token traces are "
                "re-read until stable, which can miss a late write; run `python -m trainer_client.gateway`",
                self._url,
            )
            return None
        response.raise_for_status()
        in_flight = response.headers.get(CALLS_IN_FLIGHT_HEADER, "0")
        if in_flight != "0":
            logger.warning(
                "session %s still had %s model call(s) in flight at the gateway after %.0f s; its traces lack them",
                session_id,
                in_flight,
                self._settings.settle_s,
            )
        return _TRACES.validate_json(response.content)

    def _read_until_stable(self, session_id: str) -> list[TokenTrace]:
        previous: list[TokenTrace] | None = None
        for attempt in range(self._settings.attempts):
            if attempt:
                time.sleep(self._settings.delay_s)
            response = self._http.get(f"{self._url}/sessions/{session_id}/traces")
            response.raise_for_status()
            traces = _TRACES.validate_json(response.content)
            if previous is not None and traces and len(traces) == len(previous):
                return traces
            previous = traces
        return previous or []

    def close(self) -> None:
        """Finish reads in progress and close the HTTP connection pool."""
        self._pool.shutdown(wait=True)
        self._http.close()
