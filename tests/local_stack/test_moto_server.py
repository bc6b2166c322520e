"""The moto server process behaves as the AWS services the pipeline relies on, where moto alone does not."""

from __future__ import annotations

import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from botocore.exceptions import ClientError

from local_stack.provision import AwsClients

pytestmark = pytest.mark.processes

CONCURRENT_REQUESTS = 16


def _new_table(aws: AwsClients, prefix: str) -> str:
    """A new table on the moto server, keyed by the string attribute ``k``; its name."""
    table = f"{prefix}-{uuid.uuid4().hex[:8]}"
    aws.dynamodb.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return table


def test_dynamodb_transactions_stay_atomic_under_concurrent_requests(aws: AwsClients) -> None:
    # GIVEN a table with a counter, and many transactions that each put an item and then fail on the
    # counter's condition (as an admit does when no session slot is free), while plain puts run alongside
    table = _new_table(aws, "atomic")
    aws.dynamodb.put_item(TableName=table, Item={"k": {"S": "count"}, "n": {"N": "0"}})
    server_errors: list[str] = []

    def put(i: int) -> None:
        aws.dynamodb.put_item(TableName=table, Item={"k": {"S": f"kept-{i}"}})

    def failing_transaction(i: int) -> None:
        try:
            aws.dynamodb.transact_write_items(
                TransactItems=[
                    {"Put": {"TableName": table, "Item": {"k": {"S": f"rolled-back-{i}"}}}},
                    {
                        "Update": {
                            "TableName": table,
                            "Key": {"k": {"S": "count"}},
                            "UpdateExpression": "SET n = n + :one",
                            "ConditionExpression": "n < :zero",
                            "ExpressionAttributeValues": {":one": {"N": "1"}, ":zero": {"N": "0"}},
                        }
                    },
                ]
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "TransactionCanceledException":
                server_errors.append(exc.response["Error"]["Code"])

    # WHEN they all run at once against the moto server process
    with ThreadPoolExecutor(CONCURRENT_REQUESTS) as pool:
        calls = [pool.submit(put, i) for i in range(400)] + [pool.submit(failing_transaction, i) for i in range(400)]
        for call in calls:
            call.result()

    # THEN every failed transaction left nothing behind, every put is kept, and none failed inside moto
    keys = [
        item["k"]["S"]
        for page in aws.dynamodb.get_paginator("scan").paginate(TableName=table)
        for item in page["Items"]
    ]
    assert server_errors == []
    assert not [key for key in keys if key.startswith("rolled-back-")]
    assert sorted(key for key in keys if key.startswith("kept-")) == sorted(f"kept-{i}" for i in range(400))


MODEL_COPIES = """
import boto3
from moto import mock_aws
from moto.dynamodb.models.table import Table
{patch}
with mock_aws():
    dynamodb = boto3.client("dynamodb", region_name="us-east-1")
    dynamodb.create_table(
        TableName="t",
        KeySchema=[{{"AttributeName": "k", "KeyType": "HASH"}}],
        AttributeDefinitions=[{{"AttributeName": "k", "AttributeType": "S"}}],
        BillingMode="PAY_PER_REQUEST",
    )
    update = {{"TableName": "t", "Key": {{"k": {{"S": "n"}}}}, "UpdateExpression": "ADD n :one",
              "ExpressionAttributeValues": {{":one": {{"N": "1"}}}}}}
    for _ in range(50):
        dynamodb.transact_write_items(TransactItems=[{{"Update": update}}])
    print(len(Table.instances_tracked))
"""


def _printed(template: str, patch: str, words: int) -> list[str]:
    """Run ``template`` with ``patch`` in a fresh interpreter (moto unpatched unless ``patch`` patches it); return the
    last ``words`` words it printed."""
    code = template.format(patch=patch)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return done.stdout.split()[-words:]


def _tables_kept_after_50_transactions(patch: str) -> int:
    (kept,) = _printed(MODEL_COPIES, patch, 1)
    return int(kept)


def test_the_server_keeps_no_copy_of_a_table_a_transaction_made() -> None:
    # GIVEN moto's own behaviour: every model object, even a transaction's copy of a whole table, stays listed
    # (the baseline, so the test notices if moto changes)
    assert _tables_kept_after_50_transactions("") > 50
    # WHEN the server's patch applies
    kept = _tables_kept_after_50_transactions(
        "from local_stack.moto_server import forget_model_instances\nforget_model_instances()"
    )
    # THEN nothing lists them, so the copies are freed and memory follows what the tables hold
    assert kept == 0


def test_a_cancelled_transaction_puts_back_every_item_it_changed(aws: AwsClients) -> None:
    # GIVEN a table with two items, and a transaction that updates one, deletes the other, puts a third and
    # then fails a condition
    table = _new_table(aws, "rollback")
    aws.dynamodb.put_item(TableName=table, Item={"k": {"S": "updated"}, "n": {"N": "1"}})
    aws.dynamodb.put_item(TableName=table, Item={"k": {"S": "deleted"}, "n": {"N": "1"}})
    transaction = [
        {
            "Update": {
                "TableName": table,
                "Key": {"k": {"S": "updated"}},
                "UpdateExpression": "SET n = :two",
                "ExpressionAttributeValues": {":two": {"N": "2"}},
            }
        },
        {"Delete": {"TableName": table, "Key": {"k": {"S": "deleted"}}}},
        {"Put": {"TableName": table, "Item": {"k": {"S": "new"}}}},
        {
            "ConditionCheck": {
                "TableName": table,
                "Key": {"k": {"S": "missing"}},
                "ConditionExpression": "attribute_exists(k)",
            }
        },
    ]
    # WHEN it runs
    try:
        aws.dynamodb.transact_write_items(TransactItems=transaction)
    except ClientError as exc:
        assert exc.response["Error"]["Code"] == "TransactionCanceledException"
    else:
        raise AssertionError("the transaction should have been cancelled")
    # THEN the table is as it was before
    items = {item["k"]["S"]: item for item in aws.dynamodb.scan(TableName=table)["Items"]}
    assert sorted(items) == ["deleted", "updated"]
    assert items["updated"]["n"] == {"N": "1"} and items["deleted"]["n"] == {"N": "1"}


#: Sends 20 batches of ten to one standard queue, then receives ten messages three times; prints the datetimes
#: moto's clock built during the sends, the queue attribute maps read during the receives, and the largest gap
#: between the time SQS reads and ``time.time()`` (ms).
QUEUE_SCANS = """
import time
import boto3
from moto import mock_aws
from moto.core import utils
from moto.sqs import models
{patch}
counts = {{"datetimes": 0, "attribute_maps": 0}}
utcnow, attributes = utils.utcnow, models.Queue.attributes.fget
def counted_utcnow():
    counts["datetimes"] += 1
    return utcnow()
def counted_attributes(queue):
    counts["attribute_maps"] += 1
    return attributes(queue)
utils.utcnow = counted_utcnow
models.Queue.attributes = property(counted_attributes)
with mock_aws():
    sqs = boto3.client("sqs", region_name="us-east-1")
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    counts["datetimes"] = 0
    for _ in range(20):
        sqs.send_message_batch(QueueUrl=url, Entries=[{{"Id": str(i), "MessageBody": "m"}} for i in range(10)])
    datetimes, counts["attribute_maps"] = counts["datetimes"], 0
    received = sum(len(sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]) for _ in range(3))
    gap = max(abs(models.unix_time_millis() - time.time() * 1000) for _ in range(100))
    print(datetimes, counts["attribute_maps"], received, gap)
"""


def _queue_scans(patch: str) -> tuple[int, int, int, float]:
    datetimes, maps, received, gap = _printed(QUEUE_SCANS, patch, 4)
    return int(datetimes), int(maps), int(received), float(gap)


def test_sqs_sends_and_receives_do_not_scan_the_queue_per_message_to_read_the_clock_or_retention() -> None:
    # GIVEN moto's own behaviour: each message sent builds two datetimes per queued message (200 sent one by one:
    # tens of thousands), and each message received reads the queue's whole attribute map, every count scanned
    # (the baseline, so the test notices if moto changes)
    datetimes, maps, received, _ = _queue_scans("")
    assert datetimes > 10_000 and maps >= received == 30
    # WHEN the server's patch applies
    datetimes, maps, received, gap_ms = _queue_scans("from local_stack.moto_server import fast_sqs\nfast_sqs()")
    # THEN SQS builds no datetime to read "now", a receive reads no attribute map, the same messages come, and
    # the time SQS reads is the same to the millisecond
    assert (datetimes, maps, received) == (0, 0, 30)
    assert gap_ms < 1.0


#: Resolves four services' hosts three times each on moto's dispatcher; prints the backends found and how many
#: times moto's own lookup (a scan of every service's URL patterns) ran.
HOST_LOOKUPS = """
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
scans = 0
find = DomainDispatcherApplication.get_backend_for_host
def counted(self, host):
    global scans
    scans += 1
    return find(self, host)
DomainDispatcherApplication.get_backend_for_host = counted
{patch}
app = DomainDispatcherApplication(create_backend_app)
hosts = ["sqs.us-east-1.amazonaws.com", "dynamodb.us-east-1.amazonaws.com", "s3.amazonaws.com", "moto_api"]
found = [app.get_backend_for_host(host) for _ in range(3) for host in hosts]
print(",".join(map(str, found[:4])), scans)
"""


def _host_lookups(patch: str) -> tuple[str, int]:
    found, scans = _printed(HOST_LOOKUPS, patch, 2)
    return found, int(scans)


def test_the_server_finds_a_hosts_service_once_and_answers_the_same() -> None:
    # GIVEN moto's own dispatcher, which scans every service's URL patterns for each request
    found, scans = _host_lookups("")
    assert scans == 12
    # WHEN the server's patch applies
    kept, scans = _host_lookups("from local_stack.moto_server import quick_dispatch\nquick_dispatch()")
    # THEN each host is looked up once, with the same answers
    assert (kept, scans) == (found, 4)
