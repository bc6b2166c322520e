"""``agent_app.logging``: ART's JSON log lines with ACR's request and session ids, and when the app sets them up."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator

import pytest
from agent_app_support import invoke, new_session, rollout_block, wait_until_healthy
from starlette.testclient import TestClient

from agent_app import AgentCoreRLApp
from agent_app._sdk import BedrockAgentCoreContext
from agent_app.logging import CorrelatedFormatter, configure_logging

SDK_LOGGER = logging.getLogger("bedrock_agentcore.app")


@pytest.fixture
def bare_root() -> Iterator[logging.Logger]:
    """The root logger, restored afterwards; a test clears its handlers (pytest's come after fixtures) itself."""
    root = logging.getLogger()
    saved = (list(root.handlers), root.level, SDK_LOGGER.propagate, root.__dict__.pop("_art_logging_configured", None))
    root.setLevel(logging.WARNING)
    yield root
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])
    SDK_LOGGER.propagate = saved[2]
    root.__dict__.pop("_art_logging_configured", None)
    if saved[3] is not None:
        root.__dict__["_art_logging_configured"] = saved[3]


def _record(message: str, *, exc_info: object = None) -> logging.LogRecord:
    return logging.getLogger("agent.tools").makeRecord(
        "agent.tools",
        logging.WARNING,
        __file__,
        1,
        message,
        (),
        exc_info,  # type: ignore[arg-type]
    )


def test_a_record_is_one_json_line_with_the_requests_ids():
    # GIVEN a record logged inside a request of session s-1
    BedrockAgentCoreContext.set_request_context("r-1", "s-1")
    try:
        line = CorrelatedFormatter().format(_record("tool slow"))
    finally:
        BedrockAgentCoreContext.set_request_context(None, None)  # type: ignore[arg-type]

    # THEN it is ART's JSON line: timestamp, level, message, logger and both ids
    entry = json.loads(line)
    assert entry.keys() == {"timestamp", "level", "message", "logger", "requestId", "sessionId"}
    assert (entry["level"], entry["message"], entry["logger"]) == ("WARNING", "tool slow", "agent.tools")
    assert (entry["requestId"], entry["sessionId"]) == ("r-1", "s-1")
    assert entry["timestamp"].endswith("Z") and len(entry["timestamp"]) == len("2026-01-01T00:00:00.000Z")


def test_an_exception_adds_its_type_message_and_stack():
    try:
        raise KeyError("answer")
    except KeyError:
        entry = json.loads(CorrelatedFormatter().format(_record("failed", exc_info=sys.exc_info())))

    assert (entry["errorType"], entry["errorMessage"]) == ("KeyError", "'answer'")
    assert entry["stackTrace"][-1] == "KeyError: 'answer'\n"


def test_configure_logging_replaces_the_root_handlers_once_and_keeps_a_more_verbose_level(bare_root):
    # GIVEN a root logger someone set to DEBUG with a handler of their own
    bare_root.handlers.clear()
    theirs = logging.NullHandler()
    bare_root.addHandler(theirs)
    bare_root.setLevel(logging.DEBUG)

    # WHEN ART's helper runs twice
    configure_logging()
    (handler,) = bare_root.handlers
    configure_logging(logging.ERROR)

    # THEN one JSON handler replaced theirs, the level stayed DEBUG, the SDK's logger no longer propagates,
    # and the second call changed nothing
    assert bare_root.handlers == [handler] and isinstance(handler.formatter, CorrelatedFormatter)
    assert bare_root.level == logging.DEBUG
    assert SDK_LOGGER.propagate is False


def test_an_agent_that_configured_no_logging_gets_its_info_lines_with_the_session_id(bare_root, s3, capsys):
    # GIVEN an agent script that configured no logging, whose handler logs at INFO
    bare_root.handlers.clear()
    app = AgentCoreRLApp(s3_client=s3)

    @app.rollout_entrypoint
    def solve(payload):
        logging.getLogger("agent").info("solving %s", payload["q"])
        return {"rewards": 1.0}

    # WHEN a rollout runs
    session_id = new_session()
    with TestClient(app) as client:
        invoke(client, {"q": "2+2", "_rollout": rollout_block()}, session_id)
        wait_until_healthy(client)

    # THEN the line is on stderr, ART's JSON with the rollout's session id
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    (line,) = [entry for entry in lines if entry["logger"] == "agent"]
    assert (line["level"], line["message"], line["sessionId"]) == ("INFO", "solving 2+2", session_id)
