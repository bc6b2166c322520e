"""Read-only views of an experiment or one of its runs: queue depths, rollouts in flight, stored results.

A view is of an exp_id: the experiment's name (every run) or ``experiment/run`` (that run and the runs nested
under it, ``experiment/run/...``). Queues belong to the experiment, so their depths are always the experiment's.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rollout_contract import ExperimentResources, Status, experiment_prefix, is_result_key
from trainer_client._aws import AwsClients
from trainer_client._results import ClientResult
from trainer_client._sessions import in_flight_query
from trainer_client._stored import ResultReader

if TYPE_CHECKING:
    from types_boto3_dynamodb import DynamoDBClient
    from types_boto3_s3 import S3Client
    from types_boto3_s3.type_defs import ObjectTypeDef

__all__ = ["ExperimentStatus", "QueueDepth", "count_in_flight", "iter_result_keys", "iter_results", "read_status"]


@dataclass(frozen=True, slots=True)
class QueueDepth:
    """Approximate message counts of one queue."""

    name: str
    visible: int
    in_flight: int


@dataclass(frozen=True, slots=True)
class ExperimentStatus:
    """A snapshot of an experiment.

    Attributes:
        exp_id: the experiment, or ``experiment/run``.
        queues: the experiment's dispatch and completion queues and their dead-letter queues.
        rollouts_in_flight: rollouts of ``exp_id`` holding a session slot (the sessions table's in-flight index).
        recent: the most recently written results, newest first.
    """

    exp_id: str
    queues: list[QueueDepth]
    rollouts_in_flight: int
    recent: list[ClientResult]


def read_status(
    clients: AwsClients, resources: ExperimentResources, reader: ResultReader, recent: int, *, exp_id: str | None = None
) -> ExperimentStatus:
    """Read queue depths, the in-flight count and the ``recent`` newest results of ``exp_id`` (default: all runs);
    the result prefix is listed only for ``recent`` > 0."""
    exp_id = exp_id or resources.exp_id
    queues = []
    for spec in (resources.dispatch_queue, resources.completion_queue):
        for name in (spec.name, spec.dlq_name):
            url = clients.sqs.get_queue_url(QueueName=name)["QueueUrl"]
            attributes = clients.sqs.get_queue_attributes(
                QueueUrl=url,
                AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
            )["Attributes"]
            queues.append(
                QueueDepth(
                    name,
                    int(attributes["ApproximateNumberOfMessages"]),
                    int(attributes["ApproximateNumberOfMessagesNotVisible"]),
                )
            )
    newest = (
        heapq.nlargest(recent, _result_objects(reader.s3, reader.bucket, exp_id), key=lambda o: o["LastModified"])
        if recent > 0
        else []
    )
    return ExperimentStatus(
        exp_id,
        queues,
        count_in_flight(clients.require_dynamodb(), resources, exp_id=exp_id),
        [reader.read(obj["Key"]) for obj in newest],
    )


def count_in_flight(dynamodb: DynamoDBClient, resources: ExperimentResources, *, exp_id: str | None = None) -> int:
    """How many rollouts of ``exp_id`` hold a session slot (a paginated COUNT of the in-flight index).

    ``exp_id`` ``None`` (or the experiment's name) counts every run; a run's counts it and the runs under it.
    """
    query = {**in_flight_query(resources, exp_id), "Select": "COUNT"}
    count = 0
    while True:
        page = dynamodb.query(**query)
        count += page["Count"]
        if "LastEvaluatedKey" not in page:
            return count
        query["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _result_objects(s3: S3Client, bucket: str, exp_id: str) -> Iterator[ObjectTypeDef]:
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=experiment_prefix(exp_id)):
        for obj in page.get("Contents", []):
            if is_result_key(obj["Key"]):
                yield obj


def iter_result_keys(s3: S3Client, bucket: str, exp_id: str) -> Iterator[str]:
    """Yield the key of every result object under ``exp_id`` (an experiment's, or a run's)."""
    return (obj["Key"] for obj in _result_objects(s3, bucket, exp_id))


def iter_results(
    reader: ResultReader, exp_id: str, statuses: Collection[Status] | None = None
) -> Iterator[ClientResult]:
    """Yield every stored result under ``exp_id`` as its proof allows (one GetObject each), optionally filtered by
    status."""
    for key in iter_result_keys(reader.s3, reader.bucket, exp_id):
        result = reader.read(key)
        if statuses is None or result.status in statuses:
            yield result
