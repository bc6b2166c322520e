"""The experiment's rollouts in flight, read from its sessions table, and cancel requests for any of them.

Rollouts holding a session slot (``admitted``, ``running``) are the sessions table's in-flight index: one
paginated Query. Rollouts still waiting for capacity (``queued``) hold no slot and are in no index: finding
them scans the table (every item of the last week), so only :func:`queued_sessions` does, when asked.
Cancel requests go the way ``future.cancel()`` sends them: a ``CancelRequest`` on the dispatch queue, ten per
call; the dispatcher writes ``cancelled`` unless the rollout ended first, and the finisher stops the session.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from rollout_contract import CancelRequest, ExperimentResources, ResultKey
from rollout_contract.ids import RUN_SEPARATOR
from rollout_contract.sessions import ATTR_EXP_ID, ATTR_STATE, INFLIGHT_MARK, SessionRecord, SessionState

if TYPE_CHECKING:
    from types_boto3_dynamodb import DynamoDBClient
    from types_boto3_dynamodb.type_defs import QueryOutputTypeDef, ScanOutputTypeDef
    from types_boto3_sqs import SQSClient
    from types_boto3_sqs.type_defs import SendMessageBatchRequestEntryTypeDef

__all__ = ["in_flight_query", "in_flight_sessions", "queued_sessions", "send_cancels", "session_record"]

_SQS_BATCH = 10


def in_flight_query(resources: ExperimentResources, exp_id: str | None = None) -> dict[str, Any]:
    """The Query of the in-flight index for ``exp_id``'s rollouts.

    ``exp_id`` ``None`` (or the experiment's name) covers every run; a run's covers it and the runs under it.
    """
    index = resources.sessions_table.indexes[0]
    query: dict[str, Any] = {
        "TableName": resources.sessions_table.name,
        "IndexName": index.name,
        "KeyConditionExpression": "#p = :mark",
        "ExpressionAttributeNames": {"#p": index.partition_key},
        "ExpressionAttributeValues": {":mark": {"S": INFLIGHT_MARK}},
    }
    if exp_id is not None and exp_id != resources.exp_id:
        query["FilterExpression"] = "#e = :run OR begins_with(#e, :nested)"
        query["ExpressionAttributeNames"]["#e"] = ATTR_EXP_ID
        query["ExpressionAttributeValues"].update({":run": {"S": exp_id}, ":nested": {"S": exp_id + RUN_SEPARATOR}})
    return query


def in_flight_sessions(
    dynamodb: DynamoDBClient, resources: ExperimentResources, exp_id: str | None = None
) -> list[SessionRecord]:
    """Every rollout of ``exp_id`` (see :func:`in_flight_query`) holding a session slot, soonest deadline first."""
    return list(_records(dynamodb.get_paginator("query").paginate(**in_flight_query(resources, exp_id))))


def queued_sessions(
    dynamodb: DynamoDBClient, resources: ExperimentResources, exp_id: str | None = None
) -> list[SessionRecord]:
    """Every rollout of ``exp_id`` waiting for capacity (a Scan of the sessions table), oldest first."""
    scan: dict[str, Any] = {
        "TableName": resources.sessions_table.name,
        "FilterExpression": "#state = :queued",
        "ExpressionAttributeNames": {"#state": ATTR_STATE},
        "ExpressionAttributeValues": {":queued": {"S": SessionState.QUEUED.value}},
    }
    if exp_id is not None and exp_id != resources.exp_id:
        scan["FilterExpression"] += " AND (#e = :run OR begins_with(#e, :nested))"
        scan["ExpressionAttributeNames"]["#e"] = ATTR_EXP_ID
        scan["ExpressionAttributeValues"].update({":run": {"S": exp_id}, ":nested": {"S": exp_id + RUN_SEPARATOR}})
    pages = dynamodb.get_paginator("scan").paginate(**scan)
    return sorted(_records(pages), key=lambda record: record.submitted_at or 0.0)


def session_record(dynamodb: DynamoDBClient, resources: ExperimentResources, session_id: str) -> SessionRecord | None:
    """One rollout's item (strongly consistent), or ``None`` when the table has none for ``session_id``."""
    item = dynamodb.get_item(
        TableName=resources.sessions_table.name,
        Key={resources.sessions_table.partition_key: {"S": session_id}},
        ConsistentRead=True,
    ).get("Item")
    if item is None or ATTR_STATE not in item:  # none, or only a cancel's mark (no start recorded it)
        return None
    return SessionRecord.from_item(item)


def send_cancels(sqs: SQSClient, dispatch_queue_url: str, keys: Iterable[ResultKey]) -> list[str]:
    """Send a ``CancelRequest`` per rollout, ten per call; return the session ids the queue refused."""
    refused: list[str] = []
    for chunk in _chunks(list(keys)):
        entries: list[SendMessageBatchRequestEntryTypeDef] = [
            {
                "Id": str(i),
                "MessageBody": CancelRequest(
                    exp_id=key.exp_id, input_id=key.input_id, session_id=key.session_id
                ).to_body(),
            }
            for i, key in enumerate(chunk)
        ]
        response = sqs.send_message_batch(QueueUrl=dispatch_queue_url, Entries=entries)
        refused.extend(chunk[int(failure["Id"])].session_id for failure in response.get("Failed", []))
    return refused


def _records(pages: Iterable[QueryOutputTypeDef | ScanOutputTypeDef]) -> Iterator[SessionRecord]:
    for page in pages:
        for item in page["Items"]:
            if ATTR_STATE in item:  # a rollout's item, not a trainer's lease or a cancel's mark alone
                yield SessionRecord.from_item(item)


def _chunks(keys: list[ResultKey]) -> Iterator[list[ResultKey]]:
    for start in range(0, len(keys), _SQS_BATCH):
        yield keys[start : start + _SQS_BATCH]
