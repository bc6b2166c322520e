"""The local workers publish the functions' EMF lines to CloudWatch, as CloudWatch Logs extracts them in AWS."""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from datetime import UTC, datetime, timedelta

import boto3
from moto import mock_aws

from lambdas.observability import add_metric, bind_experiment, emit_with_dimensions, metrics
from local_stack.emf import EmbeddedMetrics, EmfStdout
from rollout_contract import metrics as names


@mock_aws
def test_the_functions_emf_lines_reach_cloudwatch_and_the_log_unchanged() -> None:
    # GIVEN a worker's stdout that reads EMF lines, and the functions' Powertools metrics of experiment 'exp-a'
    cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
    embedded, log = EmbeddedMetrics(cloudwatch), io.StringIO()
    bind_experiment("exp-a")
    # WHEN a handler emits completions with a status dimension and two durations, then the worker flushes
    with redirect_stdout(EmfStdout(log, embedded)):  # type: ignore[type-var]
        emit_with_dimensions(names.COMPLETED, {names.STATUS_DIMENSION: "succeeded"})
        emit_with_dimensions(names.COMPLETED, {names.STATUS_DIMENSION: "succeeded"})
        add_metric(names.DURATION, 2.5)
        add_metric(names.DURATION, 4.0)
        metrics.flush_metrics()
        print("a plain log line")
    embedded.flush()

    # THEN CloudWatch has them under the same names and dimensions, and the log has every line as printed
    def statistic(name: str, stat: str, **dimensions: str) -> float:
        now = datetime.now(UTC)
        points = cloudwatch.get_metric_statistics(
            Namespace=names.NAMESPACE,
            MetricName=name,
            Dimensions=[{"Name": k, "Value": v} for k, v in {names.EXP_DIMENSION: "exp-a", **dimensions}.items()],
            StartTime=now - timedelta(minutes=5),
            EndTime=now + timedelta(minutes=1),
            Period=60,
            Statistics=[stat],
        )["Datapoints"]
        return sum(point[stat] for point in points)

    assert statistic(names.COMPLETED, "Sum", status="succeeded") == 2
    assert statistic(names.DURATION, "Sum") == 6.5 and statistic(names.DURATION, "SampleCount") == 2
    lines = log.getvalue().splitlines()
    assert sum(line.startswith('{"_aws"') for line in lines) == 3 and lines[-1] == "a plain log line"


@mock_aws
def test_the_moto_server_publishes_each_queues_depth_and_oldest_message_as_sqs_does() -> None:
    # GIVEN a queue holding two messages, one of them received (in flight), and an empty queue
    from local_stack.moto_server import sample_queue_metrics

    sqs = boto3.client("sqs", region_name="us-east-1")
    busy = sqs.create_queue(QueueName="busy")["QueueUrl"]
    sqs.create_queue(QueueName="idle")
    for body in ("a", "b"):
        sqs.send_message(QueueUrl=busy, MessageBody=body)
    sqs.receive_message(QueueUrl=busy, MaxNumberOfMessages=1)
    # WHEN the server samples the queues
    sample_queue_metrics()
    # THEN AWS/SQS has each queue's visible messages and the age of its oldest (0 when empty)
    cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
    now = datetime.now(UTC)

    def maximum(name: str, queue: str) -> list[float]:
        points = cloudwatch.get_metric_statistics(
            Namespace="AWS/SQS", MetricName=name, Dimensions=[{"Name": "QueueName", "Value": queue}],
            StartTime=now - timedelta(minutes=5), EndTime=now + timedelta(minutes=1), Period=60, Statistics=["Maximum"],
        )["Datapoints"]  # fmt: skip
        return [point["Maximum"] for point in points]

    assert maximum("ApproximateNumberOfMessagesVisible", "busy") == [1.0]
    assert maximum("ApproximateNumberOfMessagesVisible", "idle") == [0.0]
    (age,) = maximum("ApproximateAgeOfOldestMessage", "busy")
    assert 0 <= age < 60
    assert maximum("ApproximateAgeOfOldestMessage", "idle") == [0.0]
