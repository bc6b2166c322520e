"""Tiny Lambda handlers the worker tests load by dotted path (``local_worker_handlers.dispatch``, ...).

Each appends what it received to a JSONL file in ``$WORKER_TEST_OUT`` so the test can read it back.
``dispatch`` fails every record whose body is ``"fail"`` and makes it visible again after 1 s, as the
real dispatcher does with its retryable records; ``finish`` raises on a batch holding a ``"raise"`` body.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import boto3

from rollout_contract import HandlerSettings

# Read at import, as the real handlers do: the worker must have exported ROLLOUTS_* before importing us.
SETTINGS = HandlerSettings.from_env()
_OUT = Path(os.environ["WORKER_TEST_OUT"])
_SQS = boto3.client("sqs")


def _record(name: str, event: dict[str, Any], context: Any) -> None:
    line = {
        "event": event,
        "exp_id": SETTINGS.exp_id,
        "context": {
            "function_name": context.function_name,
            "memory_limit_in_mb": context.memory_limit_in_mb,
            "invoked_function_arn": context.invoked_function_arn,
            "aws_request_id": context.aws_request_id,
            "remaining_ms": context.get_remaining_time_in_millis(),
        },
    }
    with (_OUT / f"{name}.jsonl").open("a") as out:
        out.write(json.dumps(line) + "\n")


def dispatch(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Record the batch; fail the records whose body is "fail"."""
    _record("dispatch", event, context)
    failures = []
    for record in event["Records"]:
        if record["body"] == "fail":
            _SQS.change_message_visibility(
                QueueUrl=SETTINGS.dispatch_queue_url, ReceiptHandle=record["receiptHandle"], VisibilityTimeout=1
            )
            failures.append({"itemIdentifier": record["messageId"]})
    return {"batchItemFailures": failures}


def finish(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Record the batch; every record succeeds, unless one's body is "raise": then the handler raises."""
    _record("finish", event, context)
    if any(record["body"] == "raise" for record in event["Records"]):
        raise RuntimeError("a function error, as Lambda counts it")
    return {"batchItemFailures": []}


def sweep(event: dict[str, Any], context: Any) -> None:
    """Record the scheduled event."""
    _record("sweep", event, context)
