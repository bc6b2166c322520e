"""Every handler runs under Powertools' ``inject_lambda_context`` and ``log_metrics``.

Each log line of an invocation carries its Lambda request id, and its metrics reach stdout (EMF) whether
the handler returns or raises.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import ValidationError

from lambdas import dispatcher, finisher, sweeper
from lambdas.observability import SERVICE, logger
from lambdas.runtime import current_runtime
from tests.lambdas.conftest import Env, sqs_event
from tests.lambdas.test_dispatcher import send_and_receive
from tests.lambdas.test_finisher import agent_writes_result, emf_blobs


@dataclass
class Context:
    """What Lambda passes as ``context`` (the fields Powertools reads)."""

    function_name: str = "finisher"
    function_version: str = "$LATEST"
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:finisher"
    memory_limit_in_mb: int = 256
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))

    def get_remaining_time_in_millis(self) -> int:
        return 600_000


@pytest.fixture
def log_lines() -> Iterator[list[dict[str, Any]]]:
    """The JSON log lines the functions' logger writes during the test, as Powertools formats them."""
    lines: list[dict[str, Any]] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(json.loads(self.format(record)))

    keep = Keep()
    keep.setFormatter(logger.registered_formatter)
    logging.getLogger(SERVICE).addHandler(keep)
    yield lines
    logging.getLogger(SERVICE).removeHandler(keep)


def test_every_log_line_of_an_invocation_carries_its_own_request_id(
    env: Env, log_lines: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a start message on the dispatch queue
    request = env.start_request()
    dispatch_context, finish_context = Context(function_name="dispatcher"), Context()

    # WHEN the dispatcher invokes it, the agent writes its result, and the finisher handles the event,
    # each under its own Lambda context
    dispatcher.handler(sqs_event(send_and_receive(env, request.to_body())), dispatch_context)
    dispatched = list(log_lines)
    log_lines.clear()
    agent_writes_result(env, request)
    messages = env.receive(env.finisher_queue_url)
    capsys.readouterr()
    finisher.handler(sqs_event(messages), finish_context)

    # THEN every line each logged names its own request (and function), and the metrics went out with it
    assert dispatched and log_lines
    assert {line["function_request_id"] for line in dispatched} == {dispatch_context.aws_request_id}
    assert {line["function_request_id"] for line in log_lines} == {finish_context.aws_request_id}
    assert {line["function_name"] for line in log_lines} == {"finisher"}
    blobs = emf_blobs(capsys.readouterr().out)
    assert any(blob.get("BatchRecords") == [float(len(messages))] for blob in blobs)


def test_metrics_flush_when_the_handler_raises(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN no settings, so the sweeper fails building its runtime
    for name in list(os.environ):
        if name.startswith("ROLLOUTS_"):
            monkeypatch.delenv(name)
    current_runtime.cache_clear()
    capsys.readouterr()

    # WHEN it runs under a Lambda context
    with pytest.raises(ValidationError):
        sweeper.handler({"source": "aws.events"}, Context(function_name="sweeper"))
    current_runtime.cache_clear()

    # THEN what it counted before failing still reached stdout
    assert any(blob.get("SweeperRuns") == [1.0] for blob in emf_blobs(capsys.readouterr().out))
