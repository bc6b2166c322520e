"""Fixtures: moto in-process for S3, SQS and DynamoDB, and an ACR double on 127.0.0.1 that speaks HTTP.

The ACR double answers ``POST /runtimes/{arn}/invocations`` and ``/stopruntimesession`` like the real
data plane (status code, ``x-amzn-ErrorType`` header, JSON message) from a script, and records every
call. It is reached through a real boto3 ``bedrock-agentcore`` client; ``mock_aws`` passes requests for
services moto does not implement through to the endpoint. It can also hold calls until several are in
flight together (:meth:`AcrDouble.hold`), which proves callers overlap without timing assumptions.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import uuid
from collections import Counter, defaultdict, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
from moto import mock_aws

from lambdas.observability import metrics
from lambdas.runtime import AwsClients, Runtime, current_runtime
from rollout_budgets.ledger import Recorded
from rollout_contract.aws import ClientFactory
from rollout_contract.budgets import ATTR_NEXT_AT, tps_budget_id
from rollout_contract.credentials import ExperimentSecret, new_secret_value
from rollout_contract.keys import ResultKey
from rollout_contract.messages import CancelRequest, DispatchRequest
from rollout_contract.proof import Provenance, ResultProof
from rollout_contract.protocol import DEFAULT_QUALIFIER, ERROR_TYPE_HEADER, SESSION_HEADER, AcrError
from rollout_contract.resources import (
    BUDGET_PARTITION_KEY,
    BUDGET_TABLE,
    ExperimentResources,
    HandlerSettings,
    result_event_pattern,
)

REGION = "us-east-1"
EXP_ID = "exp-lambdas"
BUCKET = "results-bucket"
RUNTIME_ARN = "arn:aws:bedrock-agentcore:us-east-1:123456789012:runtime/rollout_exp-abc123"
INVOKE = "invocations"
STOP = "stopruntimesession"
#: Longest a held call waits for the others before the double lets every held call through.
HOLD_TIMEOUT_S = 5.0


@dataclass
class AcrCall:
    """One request the double received."""

    operation: str
    session_id: str
    body: dict[str, Any]
    at: float
    #: The endpoint called (``?qualifier=``).
    qualifier: str = DEFAULT_QUALIFIER


@dataclass
class AcrDouble:
    """Scripted ACR data plane: per operation, a queue of errors to answer before answering 200."""

    url: str = ""
    calls: list[AcrCall] = field(default_factory=list)
    script: dict[str, deque[AcrError]] = field(default_factory=lambda: defaultdict(deque))
    lock: threading.Lock = field(default_factory=threading.Lock)
    holds: dict[str, int] = field(default_factory=dict)
    in_flight: Counter[str] = field(default_factory=Counter)
    peak: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self._arrived = threading.Condition(self.lock)

    def fail_next(self, operation: str, *errors: AcrError) -> None:
        """Answer the next calls of ``operation`` with ``errors``, in order."""
        with self.lock:
            self.script[operation].extend(errors)

    def hold(self, operation: str, *, until_in_flight: int) -> None:
        """Hold calls of ``operation`` until ``until_in_flight`` of them are in flight together, then let all through.

        Calls after that pass at once. If the others do not come within ``HOLD_TIMEOUT_S``, every held call
        goes through anyway (the test's assertion on :meth:`peak_in_flight` then fails; it never hangs).
        """
        with self.lock:
            self.holds[operation] = until_in_flight

    def peak_in_flight(self, operation: str) -> int:
        """The most calls of ``operation`` the double was answering at once."""
        with self.lock:
            return self.peak[operation]

    def calls_of(self, operation: str, session_id: str | None = None) -> list[AcrCall]:
        """The calls of ``operation`` received so far (for ``session_id`` if given)."""
        with self.lock:
            return [
                c for c in self.calls if c.operation == operation and (session_id is None or c.session_id == session_id)
            ]

    def answer(
        self, operation: str, session_id: str, body: dict[str, Any], qualifier: str = DEFAULT_QUALIFIER
    ) -> AcrError | None:
        with self.lock:
            self.calls.append(AcrCall(operation, session_id, body, time.time(), qualifier))
            self.in_flight[operation] += 1
            self.peak[operation] = max(self.peak[operation], self.in_flight[operation])
            try:
                self._wait_for_company(operation)
            finally:
                self.in_flight[operation] -= 1
            queue = self.script[operation]
            return queue.popleft() if queue else None

    def _wait_for_company(self, operation: str) -> None:
        """Under the lock: wait while ``operation`` is held and fewer calls than asked are in flight."""
        until = self.holds.get(operation)
        if until is None:
            return
        if self.in_flight[operation] < until and self._arrived.wait_for(
            lambda: operation not in self.holds, timeout=HOLD_TIMEOUT_S
        ):
            return
        self.holds.pop(operation, None)
        self._arrived.notify_all()


def _handler_class(double: AcrDouble) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            path = urlsplit(self.path).path
            qualifier = parse_qs(urlsplit(self.path).query).get("qualifier", [DEFAULT_QUALIFIER])[0]
            parts = path.strip("/").split("/")
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if len(parts) != 3 or parts[0] != "runtimes" or unquote(parts[1]) != RUNTIME_ARN:
                self._send(404, {"message": f"no such runtime path {path}"}, "ResourceNotFoundException")
                return
            error = double.answer(parts[2], self.headers.get(SESSION_HEADER, ""), json.loads(raw or b"{}"), qualifier)
            if error is not None:
                self._send(error.http_status, {"message": f"scripted {error.code}"}, error.code)
            elif parts[2] == INVOKE:
                self._send(200, {"status": "processing"})
            else:
                self._send(200, {"runtimeSessionId": self.headers.get(SESSION_HEADER)})

        def _send(self, status: int, body: dict[str, Any], error_type: str | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header(SESSION_HEADER, self.headers.get(SESSION_HEADER, ""))
            if error_type:
                self.send_header(ERROR_TYPE_HEADER, error_type)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
            return

    return Handler


@pytest.fixture
def acr() -> Iterator[AcrDouble]:
    """An ACR double listening on 127.0.0.1, port chosen by the OS; stopped after the test."""
    double = AcrDouble()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_class(double))
    server.daemon_threads = True
    # A short poll interval: shutdown() waits for the next one (0.5 s by default, at every test's teardown).
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    double.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield double
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def settings() -> HandlerSettings:
    resources = ExperimentResources.for_experiment(EXP_ID)
    return HandlerSettings(
        exp_id=EXP_ID,
        results_bucket=BUCKET,
        sessions_table=resources.sessions_table.name,
        budget_table=BUDGET_TABLE.name,
        runtime_arn=RUNTIME_ARN,
        dispatch_queue_url=f"https://sqs.{REGION}.amazonaws.com/123456789012/{resources.dispatch_queue.name}",
        tps_limit=50,
        session_budget=3,
        max_dispatch_attempts=3,
    )


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, shared_clients: None) -> Iterator[None]:
    """moto for everything moto implements (changed as the local stack's server is: tests/conftest.py), fake
    credentials; metrics and runtime cache cleared."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    metrics.clear_metrics()
    current_runtime.cache_clear()
    with mock_aws():
        yield
    metrics.clear_metrics()
    current_runtime.cache_clear()


@dataclass
class Env:
    """One provisioned experiment: its runtime (real clients: moto and the ACR double) and helpers."""

    rt: Runtime
    acr: AcrDouble
    dispatch_queue_url: str
    dispatch_dlq_url: str
    finisher_queue_url: str

    def start_request(self, *, timeout_s: float = 600, **fields: Any) -> DispatchRequest:
        """A start message with a fresh session id (``fields`` override the defaults, payload included)."""
        values: dict[str, Any] = {"payload": {"prompt": "2+2"}, "exp_id": EXP_ID, **fields}
        return DispatchRequest(input_id="problem-1", session_id=str(uuid.uuid4()), timeout_s=timeout_s, **values)

    def record_queued(self, request: DispatchRequest) -> Recorded:
        """Record a start message's rollout ``queued``, as the dispatcher does."""
        return self.rt.ledger.record_queued(
            request.key, submitted_at=request.submitted_at, deadline_at=request.deadline_at, trainer=request.trainer
        )

    def cancel_request(self, request: DispatchRequest) -> CancelRequest:
        return CancelRequest(exp_id=request.exp_id, input_id=request.input_id, session_id=request.session_id)

    def receive(self, queue_url: str, *, max_messages: int = 10) -> list[dict[str, Any]]:
        """Receive what is visible now, with the attributes Lambda's event source passes."""
        response = self.rt.clients.sqs.receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=max_messages, AttributeNames=["All"], WaitTimeSeconds=0
        )
        return response.get("Messages", [])


def experiment_proof(env: Env) -> ResultProof:
    """The experiment key's proof, read as the trainer reads it."""
    return ResultProof.from_secret(env.rt.clients.secretsmanager, EXP_ID)


def stored_provenance(env: Env, key: ResultKey) -> Provenance:
    """What the result object stored at ``key`` proves about its writer."""
    stored = env.rt.clients.s3.get_object(Bucket=BUCKET, Key=str(key))
    return experiment_proof(env).check(key.session_id, stored["Body"].read(), stored["Metadata"])


@pytest.fixture
def env(aws: None, acr: AcrDouble, settings: HandlerSettings, monkeypatch: pytest.MonkeyPatch) -> Env:
    """Bucket, tables and queues from the contract's definitions, and a runtime wired to them."""
    resources = ExperimentResources.for_experiment(EXP_ID)
    session = ClientFactory(region=REGION).session()  # the test process's (the ``aws`` fixture's shared sessions)
    s3, sqs, dynamodb, events, secretsmanager = (
        session.client(name) for name in ("s3", "sqs", "dynamodb", "events", "secretsmanager")
    )
    secretsmanager.create_secret(Name=ExperimentSecret.RESULT_KEY.secret_name(EXP_ID), SecretString=new_secret_value())
    s3.create_bucket(Bucket=BUCKET)
    dynamodb.create_table(**resources.sessions_table.create_table_request())
    dynamodb.create_table(**BUDGET_TABLE.create_table_request())
    visibility = str(resources.dispatch_queue.visibility_timeout_s)
    dispatch_url = sqs.create_queue(
        QueueName=resources.dispatch_queue.name, Attributes={"VisibilityTimeout": visibility}
    )["QueueUrl"]
    dispatch_dlq_url = sqs.create_queue(QueueName=resources.dispatch_queue.dlq_name)["QueueUrl"]
    finisher_url = sqs.create_queue(QueueName=resources.finisher_queue.name)["QueueUrl"]
    finisher_arn = sqs.get_queue_attributes(QueueUrl=finisher_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    s3.put_bucket_notification_configuration(Bucket=BUCKET, NotificationConfiguration={"EventBridgeConfiguration": {}})
    events.put_rule(Name=resources.result_rule_name, EventPattern=json.dumps(result_event_pattern(BUCKET, EXP_ID)))
    events.put_targets(Rule=resources.result_rule_name, Targets=[{"Id": "finisher", "Arn": finisher_arn}])
    settings = settings.model_copy(update={"dispatch_queue_url": dispatch_url})
    agentcore = ClientFactory(endpoints={"bedrock-agentcore": acr.url}).client(
        "bedrock-agentcore", single_attempt=True, session=session
    )
    for name, value in settings.to_env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_AGENTCORE", acr.url)
    clients = AwsClients(s3=s3, sqs=sqs, dynamodb=dynamodb, agentcore=agentcore, secretsmanager=secretsmanager)
    rt = Runtime.build(settings, clients)
    return Env(
        rt=rt,
        acr=acr,
        dispatch_queue_url=dispatch_url,
        dispatch_dlq_url=dispatch_dlq_url,
        finisher_queue_url=finisher_url,
    )


class SteppedClock:
    """Unix time that moves only when slept on, starting now."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(0.0, seconds)


def punctual(env: Env) -> Env:
    """The env with its runtime on a :class:`SteppedClock`: a wait for an invoke slot is never late.

    For tests that count calls: on a loaded host a send can miss its slot, and the new slot costs an update.
    """
    clock = SteppedClock()
    rt = Runtime.build(env.rt.settings, env.rt.clients, clock=clock, sleep=clock.sleep)
    return dataclasses.replace(env, rt=rt)


@dataclass
class CallCounter:
    """Counts the API calls boto3 clients make, by operation, through botocore's ``before-call`` event."""

    counts: Counter[str] = field(default_factory=Counter)

    def watch(self, *clients: Any) -> CallCounter:
        """Count every call ``clients`` make from now on."""
        for client in clients:
            client.meta.events.register("before-call", self._count, unique_id=f"call-counter-{id(self)}")
        return self

    def take(self) -> dict[str, int]:
        """The calls counted since the last ``take``, by operation name."""
        counts, self.counts = dict(self.counts), Counter()
        return counts

    def _count(self, model: Any, **_: Any) -> None:
        self.counts[model.name] += 1


@pytest.fixture
def calls(env: Env) -> CallCounter:
    """Counts the DynamoDB and S3 calls of the env's runtime."""
    return CallCounter().watch(env.rt.clients.dynamodb, env.rt.clients.s3)


def reserve_budget_ahead(env: Env, seconds: float) -> None:
    """Make the invoke budget's next free slot start ``seconds`` from now (others reserved the ones before)."""
    env.rt.clients.dynamodb.put_item(
        TableName=env.rt.settings.budget_table,
        Item={
            BUDGET_PARTITION_KEY: {"S": tps_budget_id(env.rt.settings.runtime_arn, env.rt.settings.runtime_qualifier)},
            ATTR_NEXT_AT: {"N": str(time.time() + seconds)},
        },
    )


def sqs_event(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The Lambda SQS event for received messages (what the event source mapping passes)."""
    return {
        "Records": [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": m.get("Attributes", {}),
                "messageAttributes": {},
                "md5OfBody": m["MD5OfBody"],
                "eventSource": "aws:sqs",
                "eventSourceARN": f"arn:aws:sqs:{REGION}:123456789012:queue",
                "awsRegion": REGION,
            }
            for m in messages
        ]
    }


def failed_ids(response: dict[str, Any]) -> set[str]:
    """Message ids a handler reported as failed."""
    return {item["itemIdentifier"] for item in response["batchItemFailures"]}
