"""Logs that carry ACR's request and session ids: ART 0.2.0's ``configure_logging`` and ``CorrelatedFormatter``.

Each record becomes one JSON line, ``{"timestamp", "level", "message", "logger"}`` plus ``requestId`` and
``sessionId`` when the record is logged within a request (``BedrockAgentCoreContext``; a rollout's handler
runs within its session's) and ``errorType``, ``errorMessage``, ``stackTrace`` for an exception. CloudWatch
Logs Insights can then filter an agent's lines by session.
"""

from __future__ import annotations

import json
import logging
import traceback
from datetime import UTC, datetime

from agent_app._sdk import BedrockAgentCoreContext

__all__ = ["CorrelatedFormatter", "configure_logging"]

#: Set on the root logger once :func:`configure_logging` has run (ART's marker name).
_CONFIGURED = "_art_logging_configured"
#: The SDK's own logger, which has a JSON handler of its own.
_SDK_LOGGER = "bedrock_agentcore.app"


class CorrelatedFormatter(logging.Formatter):
    """Formats a record as one JSON line with the current request's ``requestId`` and ``sessionId``."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as JSON (``ensure_ascii=False``)."""
        entry: dict[str, object] = {
            "timestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
            "level": record.levelname,
            "message": record.getMessage(),
            "logger": record.name,
        }
        if request_id := BedrockAgentCoreContext.get_request_id():
            entry["requestId"] = request_id
        if session_id := BedrockAgentCoreContext.get_session_id():
            entry["sessionId"] = session_id
        if record.exc_info and record.exc_info[0] is not None:
            error_type, error, trace = record.exc_info
            entry["errorType"] = error_type.__name__
            entry["errorMessage"] = str(error)
            entry["stackTrace"] = traceback.format_exception(error_type, error, trace)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(level: int = logging.INFO) -> None:
    """Send every log record to stderr as a :class:`CorrelatedFormatter` line; a second call does nothing.

    As ART's: the root logger's handlers are replaced by one ``StreamHandler``; its level becomes the more
    verbose of its own and ``level`` (a root already at ``DEBUG`` stays there); the SDK's
    ``bedrock_agentcore.app`` logger stops propagating (it writes its own JSON lines).
    """
    root = logging.getLogger()
    if getattr(root, _CONFIGURED, False):
        return
    root.handlers.clear()
    handler = logging.StreamHandler()
    handler.setFormatter(CorrelatedFormatter())
    root.addHandler(handler)
    root.setLevel(min(root.level, level))
    logging.getLogger(_SDK_LOGGER).propagate = False
    setattr(root, _CONFIGURED, True)
