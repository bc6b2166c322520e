"""The local Lambda worker as a real process: SQS events, partial batch failures, the sweeper timer."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from local_stack._process import ManagedProcess
from local_stack.moto_server import LOCAL_REGION, aws_env, endpoints_for
from local_stack.provision import AwsClients, ProvisionedExperiment, provision_experiment, provision_shared
from local_stack.stack import PROJECT_ROOT, runtime_arn
from local_stack.worker import failed_message_ids, queue_wait_s, sqs_event
from trainer_client.doctor import Experiment, function_check

pytestmark = pytest.mark.processes

HERE = Path(__file__).parent
READY_TIMEOUT_S = 30.0
EXP_ID = "worker-test"
SWEEP_INTERVAL_S = 0.5


@pytest.fixture(scope="module")
def experiment(aws: AwsClients, moto: ManagedProcess) -> ProvisionedExperiment:
    provision_shared(aws)
    return provision_experiment(
        aws, EXP_ID, region=LOCAL_REGION, runtime_arn=runtime_arn(EXP_ID), endpoints=endpoints_for(moto.url)
    )


@pytest.fixture(scope="module")
def worker(
    experiment: ProvisionedExperiment, moto: ManagedProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """A worker process running the test handlers; yields the directory they record into."""
    out = tmp_path_factory.mktemp("worker")
    ready = out / "ready"
    env = {
        **os.environ,
        **aws_env(moto.url),
        "PYTHONPATH": os.pathsep.join([str(HERE), str(PROJECT_ROOT)]),
        "WORKER_TEST_OUT": str(out),
    }
    process = ManagedProcess(
        name="worker",
        argv=[
            sys.executable,
            "-m",
            "local_stack.worker",
            "--exp",
            EXP_ID,
            "--dispatcher",
            "local_worker_handlers.dispatch",
            "--finisher",
            "local_worker_handlers.finish",
            "--sweeper",
            "local_worker_handlers.sweep",
            "--sweep-interval",
            str(SWEEP_INTERVAL_S),
            "--metrics-interval",
            "0.5",
            "--wait-time",
            "1",
            "--dispatcher-concurrency",
            "1",
            "--ready-file",
            str(ready),
        ],
        log_path=out / "worker.log",
        env=env,
        ready=ready.exists,
    )
    process.start()
    try:
        process.wait_ready(READY_TIMEOUT_S)
        yield out
    finally:
        process.stop()
    assert process.popen is not None and process.popen.returncode == 0, process.log_tail()


def _records(out: Path, name: str) -> list[dict[str, Any]]:
    path = out / f"{name}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _eventually(check: Callable[[], Any], timeout_s: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"condition not met within {timeout_s} s")


def _delivered(out: Path, name: str) -> list[dict[str, Any]]:
    return [record for line in _records(out, name) for record in line["event"]["Records"]]


def test_worker_delivers_sqs_events_with_the_fields_lambda_sets(
    worker: Path, experiment: ProvisionedExperiment, aws: AwsClients
) -> None:
    # GIVEN a running worker
    queue_url = experiment.finisher_queue_url
    # WHEN a message lands on the finisher queue
    sent = aws.sqs.send_message(QueueUrl=queue_url, MessageBody="finish-me")
    # THEN the finisher gets it as a Lambda SQS record, with a context Powertools can read
    line = _eventually(lambda: next((r for r in _records(worker, "finish")), None))
    (record,) = line["event"]["Records"]
    assert record["messageId"] == sent["MessageId"]
    assert record["body"] == "finish-me"
    assert record["receiptHandle"]
    assert record["attributes"]["ApproximateReceiveCount"] == "1"
    assert record["eventSource"] == "aws:sqs"
    assert record["eventSourceARN"].endswith(f":agentcore-rollouts-{EXP_ID}-finisher")
    assert record["awsRegion"] == LOCAL_REGION
    context = line["context"]
    assert context["function_name"] == f"agentcore-rollouts-{EXP_ID}-finisher"
    assert context["invoked_function_arn"].endswith(f":function:{context['function_name']}")
    assert context["memory_limit_in_mb"] > 0 and context["aws_request_id"] and context["remaining_ms"] > 0


def test_handlers_see_the_experiment_settings_exported_before_import(worker: Path, aws: AwsClients) -> None:
    # GIVEN the handler module reads HandlerSettings.from_env() at import
    # WHEN the sweeper has run
    line = _eventually(lambda: next(iter(_records(worker, "sweep")), None))
    # THEN it saw this experiment's ROLLOUTS_* settings
    assert line["exp_id"] == EXP_ID


def test_worker_deletes_succeeded_records_and_leaves_failed_ones_for_redelivery(
    worker: Path, experiment: ProvisionedExperiment, aws: AwsClients
) -> None:
    # GIVEN a running worker whose dispatcher fails records with body "fail"
    queue_url = experiment.descriptor.dispatch_queue_url
    # WHEN one good and one failing message are sent
    good = aws.sqs.send_message(QueueUrl=queue_url, MessageBody="ok")["MessageId"]
    bad = aws.sqs.send_message(QueueUrl=queue_url, MessageBody="fail")["MessageId"]
    # THEN the failing one comes back (receive count 2) while the good one is delivered once and deleted
    _eventually(
        lambda: any(
            r["messageId"] == bad and r["attributes"]["ApproximateReceiveCount"] == "2"
            for r in _delivered(worker, "dispatch")
        )
    )
    assert [r["messageId"] for r in _delivered(worker, "dispatch")].count(good) == 1
    attributes = aws.sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessages"])
    in_flight = aws.sqs.get_queue_attributes(
        QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessagesNotVisible"]
    )
    total = int(attributes["Attributes"]["ApproximateNumberOfMessages"]) + int(
        in_flight["Attributes"]["ApproximateNumberOfMessagesNotVisible"]
    )
    assert total == 1  # only the failing message is still on the queue


def test_worker_runs_the_sweeper_on_its_timer(worker: Path) -> None:
    # GIVEN a worker with a 0.5 s sweep interval
    # WHEN a few intervals pass
    lines = _eventually(lambda: len(_records(worker, "sweep")) >= 3 and _records(worker, "sweep"))
    # THEN the sweeper got scheduled events, a fresh one each time
    events = [line["event"] for line in lines]
    assert all(e["detail-type"] == "Scheduled Event" and e["source"] == "aws.events" for e in events)
    assert len({e["id"] for e in events}) == len(events)


def test_a_handler_that_raises_is_an_error_in_lambdas_metrics_and_fails_the_doctors_function_line(
    worker: Path, experiment: ProvisionedExperiment, aws: AwsClients, moto: ManagedProcess, monkeypatch
) -> None:
    # GIVEN a running worker whose finisher handler raises on a "raise" record
    for name, value in aws_env(moto.url).items():
        monkeypatch.setenv(name, value)
    doctor = Experiment.connect(experiment.descriptor)
    check = function_check("finisher")
    assert check(doctor).ok
    # WHEN such a record arrives
    aws.sqs.send_message(QueueUrl=experiment.finisher_queue_url, MessageBody="raise")
    # THEN the worker publishes the error as Lambda would (AWS/Lambda Errors by FunctionName), and the
    # doctor's finisher line fails on it, naming the function and where its logs are
    result = _eventually(lambda: next((line for line in [check(doctor)] if not line.ok), None), timeout_s=20)
    assert result.detail.startswith(f"agentcore-rollouts-{EXP_ID}-finisher: 1 errors, 0 throttles, ")
    assert result.fix.startswith(f"read the worker logs worker-{EXP_ID}*.log")
    assert function_check("sweeper")(doctor).ok


def test_an_unknown_failure_identifier_fails_the_whole_batch() -> None:
    # GIVEN a batch of two records
    ids = ["a", "b"]
    # WHEN the handler names a record that is not in the batch, none, or one of them
    # THEN Lambda's rules apply: unknown -> all fail; empty -> none fail; known -> that one fails
    assert failed_message_ids({"batchItemFailures": [{"itemIdentifier": "zzz"}]}, ids) == {"a", "b"}
    assert failed_message_ids({"batchItemFailures": []}, ids) == set()
    assert failed_message_ids(None, ids) == set()
    assert failed_message_ids({"batchItemFailures": [{"itemIdentifier": "b"}]}, ids) == {"b"}


def test_sqs_event_converts_message_attributes_to_the_lambda_shape() -> None:
    # GIVEN a received message with a string and a binary attribute
    message = {
        "MessageId": "m1",
        "ReceiptHandle": "r1",
        "Body": "{}",
        "Attributes": {"ApproximateReceiveCount": "3"},
        "MessageAttributes": {
            "kind": {"StringValue": "start", "DataType": "String"},
            "blob": {"BinaryValue": b"\x00\x01", "DataType": "Binary"},
        },
    }
    # WHEN it becomes a Lambda event
    (record,) = sqs_event([message], queue_arn="arn:aws:sqs:us-east-1:000000000000:q", region="us-east-1")["Records"]
    # THEN attribute names are Lambda's lowercase ones, binary values base64
    assert record["messageAttributes"]["kind"]["stringValue"] == "start"
    assert record["messageAttributes"]["blob"]["binaryValue"] == "AAE="
    assert record["attributes"]["ApproximateReceiveCount"] == "3"


def test_queue_wait_is_the_oldest_records_age_at_the_receive() -> None:
    # GIVEN a batch whose records were sent 2.5 s and 0.5 s before the receive, and one without the attribute
    now = 1_000.0
    messages = [{"Attributes": {"SentTimestamp": str(int((now - age) * 1000))}} for age in (0.5, 2.5)]
    # WHEN the worker measures how long the batch waited
    # THEN it is the oldest record's wait; a batch that carries no send time waited 0 (not an error)
    assert queue_wait_s([*messages, {"Attributes": {}}], now) == pytest.approx(2.5)
    assert queue_wait_s([{"Attributes": {}}], now) == 0.0
