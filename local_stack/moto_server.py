"""The moto server process: S3, EventBridge, SQS, DynamoDB and SSM on 127.0.0.1, no AWS account.

Clients in child processes find it through ``AWS_ENDPOINT_URL`` and ``AWS_ENDPOINT_URL_<SERVICE>`` (see
:func:`aws_env`); the ACR data and control planes (``bedrock-agentcore``, ``bedrock-agentcore-control``)
point at the emulator instead.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from local_stack._process import LOCALHOST, ManagedProcess, free_port, http_ready

__all__ = [
    "AWS_SERVICE_COMPONENTS",
    "DUMMY_CREDENTIALS",
    "EMULATOR_SERVICES",
    "LOCAL_ACCESS_KEYS",
    "LOCAL_ACCOUNT_ID",
    "LOCAL_REGION",
    "MOTO_SERVICES",
    "aws_env",
    "copy_only_touched_items",
    "credentials",
    "endpoints_for",
    "fast_sqs",
    "forbid_missing_keys",
    "forget_model_instances",
    "moto_process",
    "patch_moto",
    "prompt_revisible_messages",
    "publish_queue_metrics",
    "sample_queue_metrics",
    "report_eventbridge_switch",
    "serialize_dynamodb",
]

LOCAL_REGION = "us-east-1"
LOCAL_ACCOUNT_ID = "000000000000"
#: boto3 service names served by moto -> the suffix of their ``AWS_ENDPOINT_URL_<SUFFIX>`` variable.
MOTO_SERVICES: Mapping[str, str] = {
    "s3": "S3",
    "sqs": "SQS",
    "events": "EVENTBRIDGE",
    "dynamodb": "DYNAMODB",
    "ssm": "SSM",
    "secretsmanager": "SECRETS_MANAGER",
    "cloudwatch": "CLOUDWATCH",
    "logs": "CLOUDWATCH_LOGS",
    "sts": "STS",
}
#: boto3 service names the ACR emulator serves (data plane, and the control plane's ``GetAgentRuntime``).
EMULATOR_SERVICES: Mapping[str, str] = {
    "bedrock-agentcore": "BEDROCK_AGENTCORE",
    "bedrock-agentcore-control": "BEDROCK_AGENTCORE_CONTROL",
}
#: Access keys of the local stack, one per component (moto accepts any key), so the server can tell callers apart.
#: Only the administrator's (provisioning, tests, benchmarks) holds bucket-wide ``s3:ListBucket``, as the deploying
#: identity does in AWS; no component's role does (``infra/``), so each gets S3's 403 for a missing key. A function's
#: key signs its handler's calls and its queue's polling (Lambda's SQS poller uses the function's role). Two keys
#: sign what the twin does in an AWS service's place (:data:`AWS_SERVICE_COMPONENTS`): ``lambda``, the local worker
#: as the Lambda service (its settings, its ``AWS/Lambda`` metrics, the handlers' EMF lines as CloudWatch Logs
#: turns them into metrics, the alarms as CloudWatch evaluates them); ``acr``, the emulator's ``AWS/Bedrock-
#: AgentCore`` metrics.
LOCAL_ACCESS_KEYS: Mapping[str, str] = {
    "admin": "local-stack",
    "trainer": "local-trainer",
    "dispatcher": "local-dispatcher",
    "finisher": "local-finisher",
    "sweeper": "local-sweeper",
    "agent": "local-agent",
    "lambda": "local-lambda-service",
    "acr": "local-acr-service",
}
#: Components that stand in for an AWS service: in AWS their calls are the service's own, not API calls of ours.
AWS_SERVICE_COMPONENTS = frozenset({"lambda", "acr"})
# Dummy credentials: moto accepts any, and they keep boto3 from looking for real ones.
DUMMY_CREDENTIALS: Mapping[str, str] = {
    "AWS_ACCESS_KEY_ID": LOCAL_ACCESS_KEYS["admin"],
    "AWS_SECRET_ACCESS_KEY": "local-stack",
}


def credentials(component: str) -> dict[str, str]:
    """The dummy credentials of ``component`` (a key of :data:`LOCAL_ACCESS_KEYS`)."""
    return {**DUMMY_CREDENTIALS, "AWS_ACCESS_KEY_ID": LOCAL_ACCESS_KEYS[component]}


def endpoints_for(moto_url: str, emulator_url: str | None = None) -> dict[str, str]:
    """Map boto3 service names to local endpoint URLs (the descriptor's ``endpoints``)."""
    endpoints = dict.fromkeys(MOTO_SERVICES, moto_url)
    if emulator_url:
        endpoints.update(dict.fromkeys(EMULATOR_SERVICES, emulator_url))
    return endpoints


def aws_env(moto_url: str, emulator_url: str | None = None, *, component: str = "admin") -> dict[str, str]:
    """Environment that points boto3 at the local stack: endpoints, ``component``'s dummy credentials, region.

    ``AWS_ENDPOINT_URL`` catches every service not listed; ``bedrock-agentcore`` and
    ``bedrock-agentcore-control`` go to the emulator.
    """
    env = {"AWS_ENDPOINT_URL": moto_url, "AWS_REGION": LOCAL_REGION, "AWS_DEFAULT_REGION": LOCAL_REGION}
    env.update(credentials(component))
    for service, url in endpoints_for(moto_url, emulator_url).items():
        env[f"AWS_ENDPOINT_URL_{MOTO_SERVICES.get(service) or EMULATOR_SERVICES[service]}"] = url
    return env


def moto_process(log_path: Path, base_env: Mapping[str, str], *, port: int | None = None) -> ManagedProcess:
    """Describe a ``moto_server`` child on 127.0.0.1 (a free port unless ``port`` is given).

    The server's account id is :data:`LOCAL_ACCOUNT_ID`, so queue and rule ARNs match the emulator's. It is
    moto's own server, started through this module's ``__main__`` so that :func:`patch_moto` applies.
    """
    port = port or free_port()
    url = f"http://{LOCALHOST}:{port}"
    env = {**base_env, "MOTO_ACCOUNT_ID": LOCAL_ACCOUNT_ID, "AWS_DEFAULT_REGION": LOCAL_REGION}
    return ManagedProcess(
        name="moto",
        argv=[sys.executable, "-m", "local_stack.moto_server", "-H", LOCALHOST, "-p", str(port)],
        log_path=log_path,
        env=env,
        url=url,
        ready=http_ready(f"{url}/moto-api/"),
    )


def report_eventbridge_switch() -> None:
    """Make moto's ``GetBucketNotificationConfiguration`` report a bucket's EventBridge switch, as S3 does.

    moto 5.2 stores ``EventBridgeConfiguration`` and emits events for it, but leaves it out of the answer,
    so ``rollouts doctor`` could not see the switch it checks in AWS. This adds the element to moto's
    response when the bucket has it; everything else is moto's own answer.
    """
    from moto.s3.responses import S3Response

    answer = S3Response.get_bucket_notification
    if getattr(answer, "reports_eventbridge", False):
        return

    def get_bucket_notification(self: Any) -> Any:
        status, headers, body = answer(self)
        configuration = self.backend.get_bucket_notification_configuration(self.bucket_name)
        if status != 200 or configuration is None or configuration.event_bridge is None:
            return status, headers, body
        root = ElementTree.fromstring(body)
        namespace = root.tag.partition("}")[0] + "}" if root.tag.startswith("{") else ""
        root.tag = f"{namespace}NotificationConfiguration"
        ElementTree.SubElement(root, f"{namespace}EventBridgeConfiguration")
        return status, headers, ElementTree.tostring(root, encoding="unicode", xml_declaration=True)

    get_bucket_notification.reports_eventbridge = True  # type: ignore[attr-defined]
    setattr(S3Response, "get_bucket_notification", get_bucket_notification)  # noqa: B010 - a method, for mypy


def forget_model_instances() -> None:
    """Stop moto from keeping every model object it ever created, so its memory follows what it stores.

    moto 5.2 appends each new model instance (tables, items, queue messages, S3 keys) to a class-level list
    for its web dashboard and never drops one. Its copies count too: each ``TransactWriteItems`` deep-copies
    every table it touches, and each received SQS message is copied, so memory grew with the table's size
    times the number of transactions (about 1.3 MB per transaction with 2,000 items of 500 bytes) until the
    kernel killed the server 2,800 rollouts into a 5,000-rollout soak, at 20 GB. Nothing here uses the
    dashboard's data; ``/moto-api/reset`` and the recorder work without the list.
    """
    from moto.core.common_models import BaseModel

    if getattr(BaseModel.__new__, "untracked", False):
        return

    def new(cls: type, *args: Any, **kwargs: Any) -> Any:
        return object.__new__(cls)

    new.untracked = True  # type: ignore[attr-defined]
    setattr(BaseModel, "__new__", staticmethod(new))  # noqa: B010 - a method, for mypy


def copy_only_touched_items() -> None:
    """Make a moto transaction save and restore only the items it touches, not a copy of each whole table.

    moto 5.2 deep-copies every table a ``TransactWriteItems`` names before it starts (to roll back), so a
    transaction costs time in the table's size: 36 ms with 200 items, 253 ms with 3,000 on this machine, and
    the sessions table keeps every rollout's item (moto does not expire TTL). With DynamoDB requests one at
    a time (:func:`serialize_dynamodb`) that stalled all DynamoDB traffic as a run grew. This runs moto's own
    transaction with the table copies turned into no-ops, after saving a copy of each item the transaction
    names; if moto raises (cancelled, invalid), those items are put back as they were (or deleted when
    they did not exist). Requests whose items cannot be located go to moto's code unchanged.
    """
    import copy

    from moto.dynamodb import models
    from moto.dynamodb.models.table import Table

    transact = models.DynamoDBBackend.transact_write_items
    if getattr(transact, "item_rollback", False):
        return

    class TablesUncopied:
        """Stands in for the ``copy`` module inside moto's transaction: tables are not copied, the rest is."""

        @staticmethod
        def deepcopy(value: Any, memo: Any = None) -> Any:
            return value if isinstance(value, Table) else copy.deepcopy(value, memo)

    def saved(backend: Any, entry: Mapping[str, Any]) -> Any:
        """A function that puts the item ``entry`` names back as it is now."""
        (op,) = entry.values()
        table_name = op["TableName"]
        table = backend.get_table(table_name)
        key = op.get("Key") or {
            name: op["Item"][name] for name in (table.hash_key_attr, table.range_key_attr) if name is not None
        }
        before = copy.deepcopy(backend.get_item(table_name, key))

        def restore() -> None:
            if before is None:
                backend.delete_item(table_name, key)
            else:
                backend.put_item(table_name, before.to_json()["Attributes"], overwrite=True)

        return restore

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        try:
            restores = [saved(self, entry) for entry in transact_items]
        except Exception:  # noqa: BLE001 - a malformed request: moto's own code reports it
            return transact(self, transact_items)
        models.copy = TablesUncopied  # type: ignore[assignment]
        try:
            return transact(self, transact_items)
        except Exception:
            for restore in restores:
                restore()
            raise
        finally:
            models.copy = copy

    transact_write_items.item_rollback = True  # type: ignore[attr-defined]
    setattr(models.DynamoDBBackend, "transact_write_items", transact_write_items)  # noqa: B010 - a method


def serialize_dynamodb() -> None:
    """Make moto's DynamoDB answer one request at a time, so its transactions are atomic as DynamoDB's are.

    moto 5.2's server runs requests on threads, and ``TransactWriteItems`` applies its items one by one and
    rolls a failed transaction back by putting back a copy of each whole table taken when it began. Two
    requests at once then corrupt the table: a failed transaction's rollback erases what other requests
    wrote meanwhile, or resurrects another transaction's half-applied items (a rollout left ``admitted``
    by an admit that reported "no free slot"), and copying a table while another thread writes it fails
    with HTTP 500. One lock around every DynamoDB request rules all of that out; moto serves a request
    in a few milliseconds, so DynamoDB throughput stays what one moto thread gives under the GIL anyway.
    """
    from moto.dynamodb.responses import DynamoHandler

    answer = DynamoHandler.call_action
    if getattr(answer, "serialized", False):
        return
    lock = threading.Lock()

    def call_action(self: Any) -> Any:
        with lock:
            return answer(self)

    call_action.serialized = True  # type: ignore[attr-defined]
    setattr(DynamoHandler, "call_action", call_action)  # noqa: B010 - a method, for mypy


def prompt_revisible_messages() -> None:
    """Make a long-polling ``ReceiveMessage`` return a message as soon as it is visible again, as SQS does.

    moto 5.2's long poll wakes when a message is sent, and otherwise re-checks the queue once a second, so
    a message whose visibility timeout ran out (a requeue with a 1 s delay, a dispatcher's lease) waited up
    to a second more for a poller that was already waiting. This wakes the poller when the next in-flight or
    delayed message of the queue becomes visible, never later than moto's own second.
    """
    from moto.core.utils import unix_time_millis
    from moto.sqs.models import Queue

    if getattr(Queue.wait_for_messages, "prompt", False):
        return

    def wait_for_messages(self: Any, timeout: float) -> None:
        now = unix_time_millis()
        upcoming = [at for m in list(self._messages) if (at := max(m.visible_at, m.delayed_until)) > now]
        wait_s = min(timeout, (min(upcoming) - now) / 1000 + 0.001) if upcoming else timeout
        with self._messages_lock:
            self._messages_lock.wait_for(lambda: self.messages, timeout=wait_s)

    wait_for_messages.prompt = True  # type: ignore[attr-defined]
    setattr(Queue, "wait_for_messages", wait_for_messages)  # noqa: B010 - a method, for mypy


def fast_sqs() -> None:
    """Take moto's SQS off its per-message scans of the whole queue: a clock that reads ``time.time()``, and a
    retention check that reads the queue's retention period instead of all of its attributes.

    moto 5.2 reads the time (two datetimes built) once per message per check of its visibility and delay.
    Every ``SendMessage`` reads the queue's whole attribute map, message counts included, for one flag, and
    ``ReceiveMessage`` does the same for each message it returns, to read the retention period: each such
    read scans every message of the queue. A ``SendMessageBatch`` of ten took 55 ms at idle with 500 messages
    queued and grew with the queue (1,040 messages sent in ten-message batches: 12.7 s), and a receive of
    ten took 30 ms with 1,000 queued, so a backlog's sends were quadratic. The time read is the same
    (milliseconds since the Unix epoch; only readings of "now" change, a given datetime is converted as
    before), and a message past the queue's retention period is still not delivered.
    """
    from moto.sqs import models

    millis, seconds = models.unix_time_millis, models.unix_time
    if getattr(millis, "fast", False):
        return

    def unix_time_millis(dt: Any = None) -> float:
        return time.time() * 1000.0 if dt is None else millis(dt)

    def unix_time(dt: Any = None) -> float:
        return time.time() if dt is None else seconds(dt)

    def is_message_valid_based_on_retention_period(self: Any, queue_name: str, message: Any) -> bool:
        retention_s = int(self.get_queue(queue_name).message_retention_period)
        sent_ms: int = message.sent_timestamp
        return time.time() < retention_s + sent_ms / 1000

    unix_time_millis.fast = True  # type: ignore[attr-defined]
    models.unix_time_millis = unix_time_millis
    models.unix_time = unix_time
    setattr(  # noqa: B010 - a method, for mypy
        models.SQSBackend, "is_message_valid_based_on_retention_period", is_message_valid_based_on_retention_period
    )


def quick_dispatch() -> None:
    """Make the server find a request's service without a scan of every service's URL patterns, and log no line
    per request.

    moto's server maps each request's host (here always 127.0.0.1, so the one its signature names) to a
    service by trying every service's URL patterns in turn, under one lock that every request takes: about
    0.2-0.5 ms per request. The answer depends on the host name alone and the patterns never change, so
    it is kept per host name. werkzeug's access line for every request took about a tenth of the server's
    time in a 512-rollout backlog; warnings and errors are still logged.
    """
    import logging

    from moto.moto_server.werkzeug_app import DomainDispatcherApplication

    find = DomainDispatcherApplication.get_backend_for_host
    if getattr(find, "kept", False):
        return
    logging.getLogger("werkzeug").setLevel(logging.WARNING)

    def get_backend_for_host(self: Any, host: str | None) -> Any:
        known = self.__dict__.setdefault("_rollouts_backend_by_host", {})
        if host not in known:
            known[host] = find(self, host)
        return known[host]

    get_backend_for_host.kept = True  # type: ignore[attr-defined]
    setattr(DomainDispatcherApplication, "get_backend_for_host", get_backend_for_host)  # noqa: B010 - a method, for mypy


def forbid_missing_keys(listers: frozenset[str] = frozenset({LOCAL_ACCESS_KEYS["admin"]})) -> None:
    """Answer GetObject and HeadObject of a missing key with 403 ``AccessDenied`` unless the caller may list the bucket.

    S3 returns 404 for a missing key only to a caller holding ``s3:ListBucket`` for that request; a grant
    conditioned on ``s3:prefix`` does not apply (GetObject carries no prefix), so such callers get 403. moto
    answers 404 to everyone, which hid code that needs a 404. ``listers`` are the access keys (from the request's
    signature) that hold bucket-wide ``ListBucket``; every other caller gets AWS's 403.
    """
    from moto.s3.exceptions import MissingKey, S3AccessDeniedError
    from moto.s3.responses import S3Response

    get, head = S3Response.get_object, S3Response.head_object
    if getattr(get, "forbids_missing", False):
        return

    def may_list(response: Any) -> bool:
        authorization = response.headers.get("Authorization") or ""
        credential = authorization.partition("Credential=")[2] or response.querystring.get("X-Amz-Credential", [""])[0]
        return credential.partition("/")[0] in listers

    def get_object(self: Any) -> Any:
        try:
            return get(self)
        except MissingKey:
            if may_list(self):
                raise
            raise S3AccessDeniedError() from None

    def head_object(self: Any, *args: Any, **kwargs: Any) -> Any:
        status, headers, body = head(self, *args, **kwargs)
        if status == 404 and not may_list(self):
            return 403, headers, body
        return status, headers, body

    get_object.forbids_missing = True  # type: ignore[attr-defined]
    setattr(S3Response, "get_object", get_object)  # noqa: B010 - a method, for mypy
    setattr(S3Response, "head_object", head_object)  # noqa: B010 - a method, for mypy


def percentile_statistics() -> None:
    """Answer ``GetMetricData``'s percentile statistics (``p50``, ``p99.9``) as CloudWatch does, from the values.

    moto 5.2 knows Sum, Average, Minimum, Maximum and SampleCount only, and answers ``None`` for ``pNN``: the
    dashboard's and ``rollouts top``'s duration percentiles had no values on the local stack. Nearest rank over
    the period's values (CloudWatch's are estimates of the same).
    """
    from moto.cloudwatch.models import Statistics

    known = Statistics.get_statistics_for_type
    if getattr(known, "percentiles", False):
        return

    def get_statistics_for_type(self: Any, stat: str) -> Any:
        if not stat.startswith("p"):
            return known(self, stat)
        values = sorted(self.metric_single_values_list)
        if not values:
            return None
        rank = math.ceil(float(stat[1:]) / 100 * len(values))
        return values[min(max(rank, 1), len(values)) - 1]

    get_statistics_for_type.percentiles = True  # type: ignore[attr-defined]
    setattr(Statistics, "get_statistics_for_type", get_statistics_for_type)  # noqa: B010 - a method, for mypy


#: How long the server's thread holding the GIL keeps it while another waits (Python's default: 5 ms). A request's
#: thread gives the GIL up at each socket read and write and waits that long to get it back behind threads that
#: compute (DynamoDB's expressions, a serializer), about ten times a request: under a backlog a 1-key ListObjectsV2
#: took 0.17 s (p50; 0.05 s at 0.5 ms, 6 ms at idle, D105).
SWITCH_INTERVAL_S = 0.0005

#: Seconds between two samples of every queue's depth and oldest message (AWS publishes them every minute).
QUEUE_METRICS_INTERVAL_S = 5.0


def sample_queue_metrics() -> None:
    """Publish every queue's ``AWS/SQS`` gauges to the local CloudWatch once, as SQS does in AWS: messages
    visible (``ApproximateNumberOfMessagesVisible``) and the age of the oldest (``ApproximateAgeOfOldestMessage``,
    0 for an empty queue). ``NumberOfMessagesSent`` is not published: a sample cannot count the messages sent
    and deleted between two samples."""
    from moto.cloudwatch.models import cloudwatch_backends
    from moto.sqs.models import sqs_backends

    now = time.time()  # the data points are stamped by moto, now (its clock: naive UTC)
    for account, regions in list(sqs_backends.items()):
        for region, backend in list(regions.items()):
            data: list[dict[str, Any]] = []
            for name, queue in list(backend.queues.items()):
                messages = list(queue._messages)
                visible = sum(1 for message in messages if message.visible and not message.delayed)
                # moto types sent_timestamp as None (its first assignment); it is the milliseconds of the send
                sent = [stamp for message in messages if (stamp := getattr(message, "sent_timestamp", None))]
                oldest = max(0.0, now - min(sent) / 1000) if sent else 0.0
                data += [
                    {
                        "MetricName": metric,
                        "Dimensions": [{"Name": "QueueName", "Value": name}],
                        "Value": value,
                        "Unit": unit,
                    }
                    for metric, value, unit in (
                        ("ApproximateNumberOfMessagesVisible", float(visible), "Count"),
                        ("ApproximateAgeOfOldestMessage", oldest, "Seconds"),
                    )
                ]
            if data:
                cloudwatch_backends[account][region].put_metric_data("AWS/SQS", data)


def publish_queue_metrics(interval_s: float = QUEUE_METRICS_INTERVAL_S) -> threading.Thread:
    """Run :func:`sample_queue_metrics` every ``interval_s`` in a daemon thread (AWS publishes every minute)."""

    def loop() -> None:
        while True:
            time.sleep(interval_s)
            try:
                sample_queue_metrics()
            except Exception as exc:  # a queue changing under the sample: the next one reads it again
                print(f"queue metrics: {type(exc).__name__}: {exc}", file=sys.stderr)

    thread = threading.Thread(target=loop, name="queue-metrics", daemon=True)
    thread.start()
    return thread


def patch_moto() -> None:
    """Apply every change this module makes to moto, as the local stack's server runs with them (each is idempotent).

    The tests' in-process moto servers call it too, so they answer as the local stack does.
    """
    report_eventbridge_switch()
    serialize_dynamodb()
    copy_only_touched_items()
    prompt_revisible_messages()
    fast_sqs()
    quick_dispatch()
    forget_model_instances()
    forbid_missing_keys()
    percentile_statistics()


if __name__ == "__main__":
    from moto.server import main

    from local_stack.call_log import CallLog, record_moto_calls

    if (call_log := CallLog.from_env()) is not None:
        record_moto_calls(call_log)
    patch_moto()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    publish_queue_metrics()
    main()
