"""The experiment's rollouts in flight, read from its sessions table, and cancel requests for any of them.

Rollouts holding a session slot (``admitted``, ``running``) are the sessions table's in-flight index: one
paginated Query. Rollouts still waiting for capacity (``queued``) hold no slot and are in no index: finding
them scans the table (every item of the last week), so only :func:`queued_sessions` does, when asked.
Cancel requests go the way ``future.cancel()`` sends them: a ``CancelRequest`` on the dispatch queue, ten per
call; the dispatcher writes ``cancelled`` unless the rollout ended first, and the finisher stops the session.

The table learns that a rollout ended after its result is stored (the finisher marks it from the result's event),
seconds later at a backlog. So the views check what the table lists as in flight against the stored results
(:func:`check_in_flight`: about one ListObjectsV2 per input id listed or fewer, one GetObject per result found;
across refreshes :class:`InFlightCheck` keeps what it found, so only what is not known to have ended is checked
again), and the latest failures of a window are read from the finished items themselves (:func:`recent_failures`: at
most :data:`FAILURE_SCAN_PAGES` Scan pages), whoever watched them end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from rollout_contract import CancelRequest, ExperimentResources, ResultKey, Status
from rollout_contract.ids import RUN_SEPARATOR
from rollout_contract.resources import SESSIONS_PARTITION_KEY
from rollout_contract.sandbox import is_sandbox_session
from rollout_contract.sessions import (
    ATTR_EXP_ID,
    ATTR_FINISHED_AT,
    ATTR_INPUT_ID,
    ATTR_STATE,
    ATTR_STATUS,
    INFLIGHT_MARK,
    SessionRecord,
    SessionState,
)
from trainer_client._results import ClientResult

if TYPE_CHECKING:
    from types_boto3_dynamodb import DynamoDBClient
    from types_boto3_dynamodb.type_defs import QueryOutputTypeDef, ScanOutputTypeDef
    from types_boto3_s3 import S3Client
    from types_boto3_sqs import SQSClient
    from types_boto3_sqs.type_defs import SendMessageBatchRequestEntryTypeDef

    from trainer_client._stored import ResultReader

__all__ = [
    "CHECKED_INPUT_IDS",
    "FAILURE_SCAN_PAGES",
    "InFlightCheck",
    "InFlightView",
    "check_in_flight",
    "in_flight_query",
    "in_flight_sessions",
    "queued_sessions",
    "recent_failures",
    "send_cancels",
    "session_record",
]

_SQS_BATCH = 10
#: Input ids whose stored results one check lists at most (one ListObjectsV2 each, soonest deadline first).
CHECKED_INPUT_IDS = 200
#: Scan pages (1 MB of items each) one read of the latest failures takes at most.
FAILURE_SCAN_PAGES = 2
_READERS = 8
#: Keys a ListObjectsV2 page may return for the cost of one call more: a call's own cost against each key's (the
#: local stack: 8 ms a call, 0.42 ms a key; boto3's share alone: about 3 ms and 0.15 ms).
KEYS_PER_CALL = 20
_MAX_KEYS = 1000
_Read = TypeVar("_Read")


@dataclass(frozen=True)
class InFlightView:
    """What the sessions table lists as in flight, checked against the stored results.

    Attributes:
        in_flight: listed, and no result stored (or beyond the check's bound: ``unchecked`` of them).
        ended: listed, but the result is stored: the rollout ended and the table does not know it yet.
        unchecked: rollouts in ``in_flight`` not checked (past :data:`CHECKED_INPUT_IDS` input ids).
    """

    in_flight: list[SessionRecord]
    ended: list[tuple[SessionRecord, ClientResult]] = field(default_factory=list)
    unchecked: int = 0


def check_in_flight(
    reader: ResultReader, records: Sequence[SessionRecord], exp_id: str, *, limit: int = CHECKED_INPUT_IDS
) -> InFlightView:
    """Split ``records`` (as the table lists them) into those still in flight and those whose result is stored.

    Checks at most ``limit`` input ids, in the order listed: a walk of the run's prefix while it passes them densely,
    else one ListObjectsV2 per input id (:func:`_stored`), and one GetObject per result found, each read as its proof
    allows as soon as its list answered, eight calls at a time. Sandboxes are passed through (a sandbox stores no
    result).
    """
    s3, bucket = reader.s3, reader.bucket
    keys = {
        record.session_id: ResultKey(record.exp_id or exp_id, record.input_id, record.session_id)
        for record in records
        if record.input_id is not None and not is_sandbox_session(record.session_id)
    }
    prefixes = list(dict.fromkeys(f"{key.exp_id}/{key.input_id}/" for key in keys.values()))
    checked = set(prefixes[:limit])
    wanted = {str(key) for key in keys.values() if f"{key.exp_id}/{key.input_id}/" in checked}

    with ThreadPoolExecutor(_READERS) as pool:
        results = {result.session_id: result for result in _stored(s3, bucket, checked, wanted, pool, reader.read)}
    return InFlightView(
        in_flight=[record for record in records if record.session_id not in results],
        ended=[(record, results[record.session_id]) for record in records if record.session_id in results],
        unchecked=sum(1 for key in keys.values() if f"{key.exp_id}/{key.input_id}/" not in checked),
    )


def _stored(
    s3: S3Client,
    bucket: str,
    prefixes: set[str],
    wanted: set[str],
    pool: ThreadPoolExecutor,
    read: Callable[[str], _Read],
) -> list[_Read]:
    """``read`` of each ``wanted`` key stored under ``prefixes`` (``exp_id/input_id/``), as soon as a list found it.

    A run's prefixes are walked in key order with ListObjectsV2 pages of the run's own prefix from the first, each of
    at most two keys per prefix not yet passed, while a page passes at least one prefix per :data:`KEYS_PER_CALL`
    keys it returns; the prefixes left are listed one each, in ``pool``. So the input ids of a run in flight side by
    side (an eval's, a step's) cost a call or two, and no run costs more than about twice one list per input id.
    Not pages of 1,000 keys (D99): a call's cost grows with the keys it returns, and the walk went on through the
    results of rollouts that ended (D105). A key is read right after the list that found it, so what a view shows
    of a prefix is as old as its list, not as the check's last call.
    """
    by_run: dict[str, list[str]] = {}
    for prefix in sorted(prefixes):
        by_run.setdefault(prefix.rsplit("/", 2)[0] + "/", []).append(prefix)

    def read_all(keys: Iterable[str]) -> list[_Read]:
        return [read(key) for key in keys if key in wanted]

    def listed(prefix: str) -> list[_Read]:
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return read_all(entry["Key"] for page in pages for entry in page.get("Contents", []))

    reads: list[Future[list[_Read]]] = []
    for run, left in by_run.items():
        own = set(left)  # a nested run's keys lie in this run's pages, and are its own run's to read
        request: dict[str, Any] = {"Bucket": bucket, "Prefix": run, "StartAfter": left[0]}
        while len(left) > 1:
            page = s3.list_objects_v2(**request, MaxKeys=min(_MAX_KEYS, 2 * len(left)))
            keys = [entry["Key"] for entry in page.get("Contents", [])]
            reads += [pool.submit(read_all, [key]) for key in keys if key.rpartition("/")[0] + "/" in own]
            if not page.get("IsTruncated") or not keys:
                left = []
                break
            ahead = [prefix for prefix in left if prefix >= keys[-1] or keys[-1].startswith(prefix)]
            paid = (len(left) - len(ahead)) * KEYS_PER_CALL >= len(keys)
            left = ahead
            if not paid:
                break
            request = {"Bucket": bucket, "Prefix": run, "ContinuationToken": page["NextContinuationToken"]}
        reads += [pool.submit(listed, prefix) for prefix in left]
    return [value for done in reads for value in done.result()]


class InFlightCheck:
    """:func:`check_in_flight` across refreshes (``rollouts top``): a result found stored is kept, since a
    stored result never changes, so a refresh lists only the input ids with a rollout not yet found ended and reads
    only the results it finds new. The table lists an ended rollout until the finisher marks it (a minute at a
    backlog on a loaded machine); without this, every refresh listed and read each of them again.

    Per refresh: the input ids with a rollout not known to have ended, listed as :func:`check_in_flight` lists them
    (at most about one ListObjectsV2 each), one GetObject per result found since the last refresh. Results are kept only
    while the table still lists their rollout.
    """

    def __init__(self, check: Callable[[Sequence[SessionRecord]], InFlightView]) -> None:
        """``check`` checks records against the stored results: :func:`check_in_flight` with its store bound."""
        self._check = check
        self._ended: dict[str, ClientResult] = {}

    def __call__(self, records: Sequence[SessionRecord]) -> InFlightView:
        """``records`` (as the table lists them now) split into those in flight and those whose result is stored."""
        view = self._check([record for record in records if record.session_id not in self._ended])
        listed = {record.session_id for record in records}
        self._ended = {sid: result for sid, result in self._ended.items() if sid in listed}
        self._ended.update((record.session_id, result) for record, result in view.ended)
        return InFlightView(
            in_flight=view.in_flight,
            ended=[(record, self._ended[record.session_id]) for record in records if record.session_id in self._ended],
            unchecked=view.unchecked,
        )


def recent_failures(
    dynamodb: DynamoDBClient,
    resources: ExperimentResources,
    since: float,
    exp_id: str | None = None,
    *,
    pages: int = FAILURE_SCAN_PAGES,
) -> tuple[list[tuple[float, SessionRecord]], bool]:
    """The rollouts of ``exp_id`` that ended other than ``succeeded`` since ``since``, newest first, as the
    finisher and sweeper marked them (status and time), and whether the read was complete.

    At most ``pages`` Scan calls (a page reads up to 1 MB of items before the filter); a table larger than that
    gives the failures found in what was read, and ``False``.
    """
    scan: dict[str, Any] = {
        "TableName": resources.sessions_table.name,
        "FilterExpression": "#state = :finished AND #status <> :succeeded AND #at >= :since",
        "ProjectionExpression": "#id, #state, #status, #at, #e, #input",
        "ExpressionAttributeNames": {
            "#id": SESSIONS_PARTITION_KEY,
            "#state": ATTR_STATE,
            "#status": ATTR_STATUS,
            "#at": ATTR_FINISHED_AT,
            "#e": ATTR_EXP_ID,
            "#input": ATTR_INPUT_ID,
        },
        "ExpressionAttributeValues": {
            ":finished": {"S": SessionState.FINISHED.value},
            ":succeeded": {"S": Status.SUCCEEDED.value},
            ":since": {"N": repr(since)},
        },
    }
    if exp_id is not None and exp_id != resources.exp_id:
        scan["FilterExpression"] += " AND (#e = :run OR begins_with(#e, :nested))"
        scan["ExpressionAttributeValues"].update({":run": {"S": exp_id}, ":nested": {"S": exp_id + RUN_SEPARATOR}})
    found: list[tuple[float, SessionRecord]] = []
    for _ in range(pages):
        page = dynamodb.scan(**scan)
        found += [
            (float(item[ATTR_FINISHED_AT]["N"]), SessionRecord.from_item(item))
            for item in page["Items"]
            if ATTR_FINISHED_AT in item
        ]
        if "LastEvaluatedKey" not in page:
            return sorted(found, key=lambda pair: -pair[0]), True
        scan["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    return sorted(found, key=lambda pair: -pair[0]), False


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
