"""Token traces from the gateway, joined to results on the session id."""

from __future__ import annotations

import logging
import time

import httpx
from pydantic import TypeAdapter

from trainer_client._config import TraceSettings
from trainer_client._results import TokenTrace

__all__ = ["TraceReader", "session_base_url"]

logger = logging.getLogger("trainer_client")
_TRACES = TypeAdapter(list[TokenTrace])


def session_base_url(gateway_url: str, session_id: str) -> str:
    """The OpenAI-compatible base URL an agent uses so the gateway traces its calls under ``session_id``."""
    return f"{gateway_url.rstrip('/')}/sessions/{session_id}/v1"


class TraceReader:
    """Read a session's traces once its result exists, retrying briefly while they are still being written.

    The gateway stores traces fire-and-forget, so the reader takes a list as final once two reads in a
    row agree on its length, or after ``settings.attempts`` reads.
    """

    def __init__(self, gateway_url: str, settings: TraceSettings, *, transport: httpx.BaseTransport | None = None):
        self._url = gateway_url.rstrip("/")
        self._settings = settings
        self._http = httpx.Client(timeout=settings.timeout_s, transport=transport)

    def read(self, session_id: str) -> list[TokenTrace] | None:
        """Return the session's traces in call order, or ``None`` if the gateway could not be read."""
        previous: list[TokenTrace] | None = None
        for attempt in range(self._settings.attempts):
            if attempt:
                time.sleep(self._settings.delay_s)
            try:
                response = self._http.get(f"{self._url}/sessions/{session_id}/traces")
                response.raise_for_status()
            except httpx.HTTPError as exc:
                logger.warning("token traces of session %s unavailable: %s", session_id, exc)
                return previous
            traces = _TRACES.validate_json(response.content)
            if previous is not None and traces and len(traces) == len(previous):
                return traces
            previous = traces
        return previous

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._http.close()
