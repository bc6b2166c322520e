"""The local Lambda worker: plays the Lambda service for one experiment's functions.

moto cannot run Lambda code, so locally every function is fed by a queue and this process does what
Lambda's SQS event source does: long-poll the queue, hand the handler a real SQS event (``Records`` with
``messageId``, ``receiptHandle``, ``body``, ``attributes``, ``eventSourceARN``, ...) and a context object,
then delete the records not named in ``batchItemFailures``. Failed records stay on the queue (the
handler sets their visibility) and come back, counted in ``ApproximateReceiveCount``; a handler that
raises fails the whole batch. The sweeper gets an EventBridge scheduled event every few seconds.

Run it as ``python -m local_stack.worker --exp NAME``. Endpoints, credentials and region come from the
environment (``AWS_ENDPOINT_URL_*``); the experiment's queues and names come from its descriptor in SSM.
Handler settings are exported as ``ROLLOUTS_*`` variables before the handler modules are imported.

Like the Lambda service, the worker publishes each function's ``Invocations`` and ``Errors`` (a handler that
raised) to CloudWatch's ``AWS/Lambda`` namespace, keyed by ``FunctionName``, every few seconds
(:class:`LambdaMetrics`); ``rollouts doctor`` reads them the same way in AWS and locally. ``Throttles`` is never
published: a local function has a fixed number of execution environments and never throttles. The functions'
own metrics (embedded metric format lines on stdout) are published with them, as CloudWatch Logs would extract
them (:mod:`local_stack.emf`). The worker that runs the sweeper also creates and evaluates the experiment's
alarms (:mod:`local_stack.alarms`), which moto stores but never evaluates.

Differences from Lambda: a function's timeout is reported by ``get_remaining_time_in_millis`` but not
enforced (a thread cannot be killed), and one process can host several functions, which then share module
state (and credentials) the way warm invocations of one function would; the local stack runs one function per
process, each with its own key.
"""

from __future__ import annotations

import argparse
import base64
import importlib
import logging
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field, field_validator

from local_stack.alarms import LocalAlarms
from local_stack.emf import EmbeddedMetrics, EmfStdout
from local_stack.moto_server import LOCAL_ACCOUNT_ID, credentials
from rollout_contract.aws import ClientFactory
from rollout_contract.naming import PROJECT
from rollout_contract.resources import ExperimentDescriptor, ExperimentResources, HandlerSettings
from rollout_contract.settings import Settings

if TYPE_CHECKING:
    from types_boto3_cloudwatch import CloudWatchClient
    from types_boto3_cloudwatch.type_defs import MetricDatumTypeDef
    from types_boto3_sqs import SQSClient
    from types_boto3_sqs.type_defs import MessageTypeDef

__all__ = [
    "DEFAULT_HANDLERS",
    "FunctionSpec",
    "LambdaContext",
    "LambdaMetrics",
    "Worker",
    "WorkerSettings",
    "main",
    "queue_wait_s",
    "scheduled_event",
    "sqs_event",
]

logger = logging.getLogger("local_stack.worker")

Handler = Callable[[dict[str, Any], "LambdaContext"], Any]

DEFAULT_HANDLERS: Mapping[str, str] = {
    "dispatcher": "lambdas.dispatcher.handler",
    "finisher": "lambdas.finisher.handler",
    "sweeper": "lambdas.sweeper.handler",
}
SQS_EVENT_SOURCE = "aws:sqs"
SQS_MAX_BATCH = 10
LAMBDA_NAMESPACE = "AWS/Lambda"


@dataclass
class LambdaContext:
    """The context object Lambda passes to a handler: what Powertools and handlers read."""

    function_name: str
    invoked_function_arn: str
    memory_limit_in_mb: int
    timeout_s: float
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    function_version: str = "$LATEST"
    log_group_name: str = ""
    log_stream_name: str = ""
    _started: float = field(default_factory=time.monotonic, repr=False)

    def __post_init__(self) -> None:
        self.log_group_name = self.log_group_name or f"/aws/lambda/{self.function_name}"
        self.log_stream_name = self.log_stream_name or f"local/[$LATEST]{uuid.uuid4().hex}"

    def get_remaining_time_in_millis(self) -> int:
        """Milliseconds left before the function's timeout."""
        return max(0, int((self.timeout_s - (time.monotonic() - self._started)) * 1000))


def _lambda_message_attributes(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """Convert SQS API message attributes (``StringValue``) to the Lambda event's shape (``stringValue``)."""
    converted = {}
    for name, value in attributes.items():
        item: dict[str, Any] = {"stringListValues": [], "binaryListValues": [], "dataType": value["DataType"]}
        if "StringValue" in value:
            item["stringValue"] = value["StringValue"]
        if "BinaryValue" in value:
            item["binaryValue"] = base64.b64encode(value["BinaryValue"]).decode()
        converted[name] = item
    return converted


def sqs_event(messages: Sequence[Mapping[str, Any]], *, queue_arn: str, region: str) -> dict[str, Any]:
    """Build the event Lambda's SQS event source delivers for ``messages`` (as ``ReceiveMessage`` returns them)."""
    return {
        "Records": [
            {
                "messageId": message["MessageId"],
                "receiptHandle": message["ReceiptHandle"],
                "body": message["Body"],
                "attributes": dict(message.get("Attributes", {})),
                "messageAttributes": _lambda_message_attributes(message.get("MessageAttributes", {})),
                "md5OfBody": message.get("MD5OfBody", ""),
                "eventSource": SQS_EVENT_SOURCE,
                "eventSourceARN": queue_arn,
                "awsRegion": region,
            }
            for message in messages
        ]
    }


def scheduled_event(*, rule_arn: str, region: str, account: str) -> dict[str, Any]:
    """Build the event an EventBridge schedule delivers to a function."""
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": account,
        "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": [rule_arn],
        "detail": {},
    }


def queue_wait_s(messages: Sequence[Mapping[str, Any]], now: float) -> float:
    """Seconds the oldest of ``messages`` waited in its queue before this receive (from ``SentTimestamp``; 0 when
    no message carries it): where a function's backlog shows, as SQS's ``ApproximateAgeOfOldestMessage`` in AWS."""
    sent = [
        int(m["Attributes"]["SentTimestamp"]) / 1000 for m in messages if "SentTimestamp" in m.get("Attributes", {})
    ]
    return max(0.0, now - min(sent)) if sent else 0.0


def failed_message_ids(response: Any, message_ids: Sequence[str]) -> set[str]:
    """Return the ids of the records to keep, as Lambda reads a partial batch response.

    A missing or empty ``batchItemFailures`` means every record succeeded; an identifier that is empty or
    not in the batch makes Lambda treat the whole batch as failed.
    """
    failures = (response or {}).get("batchItemFailures") if isinstance(response, Mapping) else None
    if not failures:
        return set()
    ids = {item.get("itemIdentifier") if isinstance(item, Mapping) else None for item in failures}
    if not ids <= set(message_ids):
        logger.warning("batchItemFailures names unknown records %s: the whole batch fails", ids - set(message_ids))
        return set(message_ids)
    return ids  # type: ignore[return-value]


class LambdaMetrics:
    """Count invocations and errors and time each invocation, per function, and publish them as Lambda's own
    ``AWS/Lambda`` metrics (``Invocations``, ``Errors``, ``Duration`` in milliseconds)."""

    def __init__(self, cloudwatch: CloudWatchClient, embedded: EmbeddedMetrics | None = None) -> None:
        self._cloudwatch = cloudwatch
        self._embedded = embedded
        self._counts: dict[str, list[int]] = {}
        self._durations: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    def record(self, function_name: str, *, error: bool, duration_ms: float) -> None:
        """Count one invocation of ``function_name`` (an error if the handler raised) that took ``duration_ms``."""
        with self._lock:
            counts = self._counts.setdefault(function_name, [0, 0])
            counts[0] += 1
            counts[1] += int(error)
            self._durations.setdefault(function_name, []).append(duration_ms)

    def flush(self) -> None:
        """Publish what was counted since the last flush (nothing when there were no invocations), and the
        functions' own EMF metrics (``embedded``)."""
        if self._embedded is not None:
            self._embedded.flush()
        with self._lock:
            counts, self._counts = self._counts, {}
            durations, self._durations = self._durations, {}
        now = datetime.now(UTC)
        data: list[MetricDatumTypeDef] = [
            {
                "MetricName": metric,
                "Dimensions": [{"Name": "FunctionName", "Value": name}],
                "Timestamp": now,
                "Value": value,
                "Unit": "Count",
            }
            for name, (invocations, errors) in counts.items()
            for metric, value in (("Invocations", invocations), ("Errors", errors))
        ]
        data += [
            {
                "MetricName": "Duration",
                "Dimensions": [{"Name": "FunctionName", "Value": name}],
                "Timestamp": now,
                "Values": values,
                "Unit": "Milliseconds",
            }
            for name, values in durations.items()
        ]
        if not data:
            return
        try:
            self._cloudwatch.put_metric_data(Namespace=LAMBDA_NAMESPACE, MetricData=data)
        except Exception:
            logger.exception("could not publish %d Lambda metrics to CloudWatch", len(data))


@dataclass(frozen=True)
class FunctionSpec:
    """One local function: its name, ARN, handler and limits."""

    name: str
    arn: str
    handler: Handler
    timeout_s: float
    memory_mb: int = 512

    def context(self) -> LambdaContext:
        """A fresh context for one invocation."""
        return LambdaContext(
            function_name=self.name,
            invoked_function_arn=self.arn,
            memory_limit_in_mb=self.memory_mb,
            timeout_s=self.timeout_s,
        )


class WorkerSettings(Settings):
    """How the worker polls and invokes.

    Attributes:
        dispatcher_concurrency: 1 to run the dispatcher, 0 to leave it off.
        finisher_concurrency: 1 to run the finisher, 0 to leave it off.
        sweep_interval_s: seconds between sweeper runs (a minute in AWS; a few seconds locally).
        metrics_interval_s: seconds between publications of the functions' ``AWS/Lambda`` metrics.
        wait_time_s: SQS long-poll wait (a message wakes it at once; a stop does not wait for it).
        batch_size: records per event (1-10).
        timeout_s: the functions' timeout, as the context reports it.
    """

    dispatcher_concurrency: int = 1
    finisher_concurrency: int = 1
    sweep_interval_s: float = Field(default=5.0, gt=0)
    metrics_interval_s: float = Field(default=5.0, gt=0)
    #: SQS long polling waits 0 to 20 s.
    wait_time_s: int = Field(default=10, ge=0, le=20)
    batch_size: int = Field(default=SQS_MAX_BATCH, ge=1, le=SQS_MAX_BATCH)
    timeout_s: float = Field(default=60.0, gt=0)

    @field_validator("dispatcher_concurrency", "finisher_concurrency")
    @classmethod
    def _one_environment(cls, concurrency: int) -> int:
        if concurrency not in (0, 1):
            raise ValueError(
                "a worker process is one Lambda execution environment per function: concurrency is 0 (off) or 1, "
                "as handlers keep module-level state (clients, batch processor, metrics) the way Lambda allows; "
                "run more worker processes for more concurrency"
            )
        return concurrency


class Worker:
    """Run queue-fed functions and a scheduled function on threads until :meth:`stop`."""

    def __init__(
        self,
        sqs: SQSClient,
        *,
        region: str,
        account: str,
        settings: WorkerSettings,
        metrics: LambdaMetrics | None = None,
    ) -> None:
        self._sqs = sqs
        self._metrics = metrics
        self._region = region
        self._account = account
        self._settings = settings
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._busy = 0
        self._idle = threading.Condition()

    def add_queue_function(self, function: FunctionSpec, queue_url: str, *, concurrency: int) -> None:
        """Feed ``function`` from ``queue_url`` with ``concurrency`` pollers."""
        queue_arn = self._sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        for index in range(concurrency):
            self._threads.append(
                threading.Thread(
                    target=self._poll_loop,
                    args=(function, queue_url, queue_arn),
                    name=f"{function.name}-{index}",
                    daemon=True,
                )
            )

    def add_scheduled_function(self, function: FunctionSpec, rule_arn: str) -> None:
        """Invoke ``function`` with a scheduled event every ``sweep_interval_s`` seconds."""
        self._threads.append(
            threading.Thread(target=self._schedule_loop, args=(function, rule_arn), name=function.name, daemon=True)
        )

    def add_alarms(self, alarms: LocalAlarms) -> None:
        """Create the experiment's alarms at start and evaluate them every ``metrics_interval_s`` seconds (what
        CloudWatch does, and moto does not)."""
        self._threads.append(threading.Thread(target=self._alarm_loop, args=(alarms,), name="alarms", daemon=True))

    def start(self) -> None:
        """Start every poller, the schedule and the metrics publisher."""
        if self._metrics is not None:
            self._threads.append(threading.Thread(target=self._publish_loop, name="lambda-metrics", daemon=True))
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Ask every thread to stop after its current poll or invocation (safe in a signal handler)."""
        self._stop.set()

    def join(self, grace_s: float | None = None) -> None:
        """Wait until no invocation is in progress, ``grace_s`` at most (default: the function timeout).

        Pollers blocked in a long poll are not waited for: they are daemon threads, and a batch they receive
        after the stop is handed back to the queue at once.
        """
        grace_s = self._settings.timeout_s if grace_s is None else grace_s
        with self._idle:
            self._idle.wait_for(lambda: self._busy == 0, timeout=grace_s)
        if self._metrics is not None:
            self._metrics.flush()

    def wait(self) -> None:
        """Block until :meth:`stop` is called."""
        while not self._stop.wait(0.5):
            pass

    def poll_once(self, function: FunctionSpec, queue_url: str, queue_arn: str) -> int:
        """Receive one batch, invoke ``function`` with it and delete what succeeded; return the batch size."""
        messages = self._sqs.receive_message(
            QueueUrl=queue_url,
            MaxNumberOfMessages=self._settings.batch_size,
            WaitTimeSeconds=self._settings.wait_time_s,
            MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"],
        ).get("Messages", [])
        if not messages:
            return 0
        if self._stop.is_set():
            self._sqs.change_message_visibility_batch(
                QueueUrl=queue_url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0}
                    for i, m in enumerate(messages)
                ],
            )
            return 0
        with self._invocation():
            return self._invoke(function, queue_url, queue_arn, messages)

    @contextmanager
    def _invocation(self) -> Iterator[None]:
        """Count an invocation in progress, so :meth:`join` waits for it."""
        with self._idle:
            self._busy += 1
        try:
            yield
        finally:
            with self._idle:
                self._busy -= 1
                self._idle.notify_all()

    def _invoke(self, function: FunctionSpec, queue_url: str, queue_arn: str, messages: list[MessageTypeDef]) -> int:
        ids = [message["MessageId"] for message in messages]
        event = sqs_event(messages, queue_arn=queue_arn, region=self._region)
        queued_s = queue_wait_s(messages, time.time())
        started = time.monotonic()
        try:
            response = function.handler(event, function.context())
        except Exception:
            logger.exception("%s failed on a batch of %d: every record returns to the queue", function.name, len(ids))
            self._record(function, started, error=True)
            return len(messages)
        self._record(function, started, error=False)
        failed = failed_message_ids(response, ids)
        done = [message for message in messages if message["MessageId"] not in failed]
        if done:
            result = self._sqs.delete_message_batch(
                QueueUrl=queue_url,
                Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(done)],
            )
            for failure in result.get("Failed", []):
                logger.warning("%s: could not delete a record: %s", function.name, failure.get("Message"))
        logger.info(
            "%s: batch of %d, %d failed, %.0f ms, queued %.1f s (the oldest record)",
            function.name,
            len(messages),
            len(failed),
            (time.monotonic() - started) * 1000,
            queued_s,
        )
        return len(messages)

    def _record(self, function: FunctionSpec, started: float, *, error: bool) -> None:
        """Count an invocation of ``function`` begun at ``started`` (``time.monotonic()``)."""
        if self._metrics is not None:
            self._metrics.record(function.name, error=error, duration_ms=(time.monotonic() - started) * 1000)

    def _publish_loop(self) -> None:
        assert self._metrics is not None
        while not self._stop.wait(self._settings.metrics_interval_s):
            self._metrics.flush()

    def _alarm_loop(self, alarms: LocalAlarms) -> None:
        try:
            alarms.create()
        except Exception:
            logger.exception("creating the experiment's alarms failed: the local stack shows none")
            return
        while not self._stop.wait(self._settings.metrics_interval_s):
            try:
                alarms.evaluate()
            except Exception:
                logger.exception("evaluating the experiment's alarms failed; trying again")

    def _poll_loop(self, function: FunctionSpec, queue_url: str, queue_arn: str) -> None:
        while not self._stop.is_set():
            try:
                self.poll_once(function, queue_url, queue_arn)
            except Exception:
                logger.exception("%s: polling %s failed; retrying in 1 s", function.name, queue_url)
                self._stop.wait(1.0)

    def _schedule_loop(self, function: FunctionSpec, rule_arn: str) -> None:
        while not self._stop.wait(self._settings.sweep_interval_s):
            event = scheduled_event(rule_arn=rule_arn, region=self._region, account=self._account)
            with self._invocation():
                started = time.monotonic()
                try:
                    function.handler(event, function.context())
                except Exception:
                    logger.exception("%s failed on a scheduled run", function.name)
                    self._record(function, started, error=True)
                else:
                    self._record(function, started, error=False)


def _import_handler(dotted: str) -> Handler:
    module_name, _, attribute = dotted.rpartition(".")
    if not module_name:
        raise SystemExit(f"handler {dotted!r} must be a dotted path like 'lambdas.dispatcher.handler'")
    handler: Handler | None = getattr(importlib.import_module(module_name), attribute, None)
    if not callable(handler):
        raise SystemExit(f"{module_name} has no callable {attribute!r}; pass the handler's dotted path")
    return handler


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    defaults = WorkerSettings()
    parser = argparse.ArgumentParser(
        prog="python -m local_stack.worker",
        description="Play the Lambda service for one experiment: feed the dispatcher and finisher from their "
        "queues and run the sweeper on a timer. An empty handler path turns that function off.",
    )
    parser.add_argument("--exp", required=True, help="experiment id (its descriptor must be in SSM)")
    for role, dotted in DEFAULT_HANDLERS.items():
        parser.add_argument(f"--{role}", default=dotted, help=f"dotted path of the {role} handler (default {dotted})")
    parser.add_argument("--dispatcher-concurrency", type=int, default=defaults.dispatcher_concurrency)
    parser.add_argument("--finisher-concurrency", type=int, default=defaults.finisher_concurrency)
    parser.add_argument("--sweep-interval", type=float, default=defaults.sweep_interval_s, help="seconds")
    parser.add_argument(
        "--metrics-interval", type=float, default=defaults.metrics_interval_s, help="seconds between metric flushes"
    )
    parser.add_argument("--wait-time", type=int, default=defaults.wait_time_s, help="SQS long-poll seconds (0-20)")
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size, help="records per event (1-10)")
    parser.add_argument("--timeout", type=float, default=defaults.timeout_s, help="function timeout in seconds")
    parser.add_argument("--tps-limit", type=float, help="invokes per second the dispatcher may spend")
    parser.add_argument("--session-budget", type=int, help="active sessions the dispatcher may hold")
    parser.add_argument("--max-dispatch-attempts", type=int, help="dispatch attempts before dispatch_failed")
    parser.add_argument("--ready-file", type=Path, help="touched once every poller runs")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    """Run the worker until SIGTERM or Ctrl-C."""
    args = _parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(threadName)s %(message)s")
    try:
        settings = WorkerSettings(
            dispatcher_concurrency=args.dispatcher_concurrency,
            finisher_concurrency=args.finisher_concurrency,
            sweep_interval_s=args.sweep_interval,
            metrics_interval_s=args.metrics_interval,
            wait_time_s=args.wait_time,
            batch_size=args.batch_size,
            timeout_s=args.timeout,
        )
    except ValueError as exc:
        raise SystemExit(f"invalid worker settings: {exc}") from exc
    resources = ExperimentResources.for_experiment(args.exp)
    # The function's credentials (the environment's) poll its queue, as Lambda's poller uses the function's role;
    # what the worker does in the Lambda service's place (settings, queue URL, AWS/Lambda metrics) has its own key.
    sqs = ClientFactory().client("sqs")
    service = ClientFactory(credentials=credentials("lambda"))
    ssm, cloudwatch = service.client("ssm"), service.client("cloudwatch")
    descriptor = ExperimentDescriptor.model_validate_json(
        ssm.get_parameter(Name=resources.descriptor_parameter)["Parameter"]["Value"]
    )
    limits = {
        name: value
        for name, value in (
            ("tps_limit", args.tps_limit),
            ("session_budget", args.session_budget),
            ("max_dispatch_attempts", args.max_dispatch_attempts),
        )
        if value is not None
    }
    handler_settings = HandlerSettings(
        exp_id=descriptor.exp_id,
        results_bucket=descriptor.results_bucket,
        sessions_table=descriptor.sessions_table,
        budget_table=descriptor.budget_table,
        runtime_arn=descriptor.runtime_arn,
        runtime_qualifier=descriptor.runtime_qualifier,
        runtime_endpoints=descriptor.runtime_endpoints,
        dispatch_queue_url=descriptor.dispatch_queue_url,
        **limits,
    )
    # The handler modules build clients and settings at import or first call: export first, import after.
    os.environ.update(handler_settings.to_env())
    account = LOCAL_ACCOUNT_ID
    embedded = EmbeddedMetrics(cloudwatch)
    sys.stdout = EmfStdout(sys.stdout, embedded)
    worker = Worker(
        sqs,
        region=descriptor.region,
        account=account,
        settings=settings,
        metrics=LambdaMetrics(cloudwatch, embedded),
    )

    def function(role: str) -> FunctionSpec | None:
        dotted = getattr(args, role)
        if not dotted:
            return None
        name = descriptor.function_names[role]
        arn = f"arn:aws:lambda:{descriptor.region}:{account}:function:{name}"
        return FunctionSpec(name=name, arn=arn, handler=_import_handler(dotted), timeout_s=settings.timeout_s)

    if dispatcher := function("dispatcher"):
        worker.add_queue_function(
            dispatcher, descriptor.dispatch_queue_url, concurrency=settings.dispatcher_concurrency
        )
    if finisher := function("finisher"):
        finisher_url = service.client("sqs").get_queue_url(QueueName=resources.finisher_queue.name)["QueueUrl"]
        worker.add_queue_function(finisher, finisher_url, concurrency=settings.finisher_concurrency)
    if sweeper := function("sweeper"):
        rule_arn = f"arn:aws:events:{descriptor.region}:{account}:rule/{PROJECT}-{descriptor.exp_id}-sweeper"
        worker.add_scheduled_function(sweeper, rule_arn)
        # One process per experiment runs the sweeper: it also plays CloudWatch's part for the alarms.
        worker.add_alarms(LocalAlarms(cloudwatch, descriptor))

    def request_stop(signum: int, _frame: Any) -> None:
        logger.info("signal %d: stopping", signum)
        worker.stop()

    signal.signal(signal.SIGTERM, request_stop)
    worker.start()
    if args.ready_file:
        args.ready_file.touch()
    logger.info("worker for %s running", descriptor.exp_id)
    try:
        worker.wait()
    except KeyboardInterrupt:
        worker.stop()
    worker.join()
    logger.info("worker for %s stopped", descriptor.exp_id)


if __name__ == "__main__":
    main()
