"""Helpers and fixtures of the trainer tests: moto in-process per test, an experiment in it built from the
contract's definitions, and a backend that plays dispatcher + agent. Imported by name (``from trainer_support
import ...``); ``conftest.py`` imports the fixtures for this directory, other test files import them too.
"""

from __future__ import annotations

import contextlib
import functools
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.server import ThreadedMotoServer

from rollout_contract import (
    CancelRequest,
    DispatchRequest,
    ErrorInfo,
    ExperimentDescriptor,
    ExperimentResources,
    RolloutResult,
    Status,
    Timings,
    parse_dispatch_message,
)
from rollout_contract.credentials import ExperimentSecret
from rollout_contract.metrics import NAMESPACE, OVERDUE, alarm_name_prefix
from rollout_contract.proof import ResultProof
from rollout_contract.resources import BUDGET_TABLE, SESSIONS_PARTITION_KEY, result_event_pattern
from rollout_contract.sessions import (
    ATTR_DEADLINE_AT,
    ATTR_INPUT_ID,
    ATTR_STATE,
    ATTR_TRAINER,
    SessionState,
)
from trainer_client import PollSettings, RolloutClient

REGION = "us-east-1"
BUCKET = "results-test"
EXP_ID = "exp-test"
ACCOUNT = "123456789012"  # moto's default
RUNTIME_ARN = f"arn:aws:bedrock-agentcore:{REGION}:{ACCOUNT}:runtime/test-abc"
FAST_POLL = PollSettings(wait_time_s=1, idle_backoff_s=0.05)


@functools.cache
def aws(service: str) -> Any:
    """A boto3 client of ``service`` for the tests' moto, made once per session.

    Making a client costs 10-20 ms (a quarter of what setting up an experiment took when each made its own);
    the in-process mock answers every client, whenever it was made.
    """
    session = boto3.Session(region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing")
    return session.client(service)


#: The experiment key of every experiment the trainer tests create (the secret the stack would create).
EXPERIMENT_KEY = "trainer-tests-experiment-key"


def queue_arn(name: str) -> str:
    """The ARN of queue ``name`` in moto's default account (what GetQueueAttributes would answer)."""
    return f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"


def create_experiment(exp_id: str = EXP_ID, bucket: str = BUCKET) -> ExperimentDescriptor:
    """Create the bucket, queues, result rule, sessions table and descriptor of one experiment."""
    resources = ExperimentResources.for_experiment(exp_id)
    s3, sqs, events, dynamodb = aws("s3"), aws("sqs"), aws("events"), aws("dynamodb")
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_notification_configuration(Bucket=bucket, NotificationConfiguration={"EventBridgeConfiguration": {}})
    urls = {}
    for spec in (resources.dispatch_queue, resources.completion_queue):
        sqs.create_queue(QueueName=spec.dlq_name)
        redrive = json.dumps(
            {"deadLetterTargetArn": queue_arn(spec.dlq_name), "maxReceiveCount": spec.max_receive_count}
        )
        urls[spec.name] = sqs.create_queue(
            QueueName=spec.name,
            Attributes={"VisibilityTimeout": str(spec.visibility_timeout_s), "RedrivePolicy": redrive},
        )["QueueUrl"]
    completion_url = urls[resources.completion_queue.name]
    completion_arn = queue_arn(resources.completion_queue.name)
    events.put_rule(Name=resources.result_rule_name, EventPattern=json.dumps(result_event_pattern(bucket, exp_id)))
    events.put_targets(Rule=resources.result_rule_name, Targets=[{"Id": "completions", "Arn": completion_arn}])
    dynamodb.create_table(**resources.sessions_table.create_table_request())
    try:  # account-wide: the first experiment of a test makes it
        dynamodb.create_table(**BUDGET_TABLE.create_table_request())
    except dynamodb.exceptions.ResourceInUseException:
        pass
    descriptor = ExperimentDescriptor(
        exp_id=exp_id,
        region=REGION,
        results_bucket=bucket,
        dispatch_queue_url=urls[resources.dispatch_queue.name],
        completion_queue_url=completion_url,
        sessions_table=resources.sessions_table.name,
        budget_table=BUDGET_TABLE.name,
        runtime_arn=RUNTIME_ARN,
        tps_limit=25.0,
        session_budget=900,
    )
    aws("ssm").put_parameter(Name=resources.descriptor_parameter, Value=descriptor.model_dump_json(), Type="String")
    for secret in ExperimentSecret:
        aws("secretsmanager").create_secret(Name=secret.secret_name(exp_id), SecretString=EXPERIMENT_KEY)
    return descriptor


def publish(descriptor: ExperimentDescriptor, **fields: Any) -> ExperimentDescriptor:
    """Publish ``descriptor`` with ``fields`` changed, as the stack would; return the new one."""
    changed = descriptor.model_copy(update=fields)
    aws("ssm").put_parameter(
        Name=ExperimentResources.for_experiment(descriptor.exp_id).descriptor_parameter,
        Value=changed.model_dump_json(),
        Type="String",
        Overwrite=True,
    )
    return changed


def put_result(result: RolloutResult, *, bucket: str = BUCKET, signed: bool = True) -> None:
    """Store ``result`` as its agent does: signed with its session's key (D100), unless ``signed`` is false."""
    body = result.to_json_bytes()
    metadata = ResultProof(EXPERIMENT_KEY).metadata(result.session_id, body) if signed else {}
    aws("s3").put_object(Bucket=bucket, Key=result.result_key, Body=body, Metadata=metadata)


Outcome = Callable[[DispatchRequest], RolloutResult]


def alarm_in_state(exp_id: str, name: str, state: str) -> None:
    """Create alarm ``name`` of experiment ``exp_id`` (on its overdue gauge) and set it to ``state``."""
    alarm = f"{alarm_name_prefix(exp_id)}{name}"
    cloudwatch = aws("cloudwatch")
    cloudwatch.put_metric_alarm(
        AlarmName=alarm, MetricName=OVERDUE, Namespace=NAMESPACE, Statistic="Maximum", Period=60,
        EvaluationPeriods=1, Threshold=0, ComparisonOperator="GreaterThanThreshold",
    )  # fmt: skip
    cloudwatch.set_alarm_state(AlarmName=alarm, StateValue=state, StateReason="test")


def scripted(request: DispatchRequest) -> RolloutResult:
    """The agent the payload asks for: ``end_as`` (a status, default succeeded) and ``reward`` (default 1.0)."""
    payload = request.payload or {}
    status = Status(payload.get("end_as", Status.SUCCEEDED))
    if status is Status.SUCCEEDED:
        now = time.time()
        return RolloutResult.from_handler_output(
            {"rewards": [payload.get("reward", 1.0)], "answer": "42"},
            key=request.key,
            s3_bucket=BUCKET,
            payload=request.payload,
            timings=Timings(submitted_at=request.submitted_at, started_at=now, finished_at=now),
        )
    error = ErrorInfo(type="ValueError", message="boom") if status is Status.AGENT_ERROR else None
    return RolloutResult.terminal(status, key=request.key, s3_bucket=BUCKET, error=error)


@dataclass
class Backend:
    """Plays the dispatcher and the agent: reads dispatch messages, records each rollout in the sessions table
    (running, with its trainer, as the dispatcher does), writes result objects through S3 and marks them finished."""

    descriptor: ExperimentDescriptor
    outcome: Outcome = scripted
    requests: list[DispatchRequest] = field(default_factory=list)
    cancels: list[CancelRequest] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.sqs, self.s3, self.dynamodb = aws("sqs"), aws("s3"), aws("dynamodb")

    def receive(self, expected: int, timeout: float = 5.0) -> list[DispatchRequest | CancelRequest]:
        """Take ``expected`` dispatch-queue messages (fails if they do not come within ``timeout``)."""
        got: list[DispatchRequest | CancelRequest] = []
        deadline = time.monotonic() + timeout
        while len(got) < expected and time.monotonic() < deadline:
            response = self.sqs.receive_message(
                QueueUrl=self.descriptor.dispatch_queue_url,
                MaxNumberOfMessages=min(10, expected - len(got)),
                WaitTimeSeconds=1,
            )
            for message in response.get("Messages", []):
                got.append(parse_dispatch_message(message["Body"]))
                self.sqs.delete_message(
                    QueueUrl=self.descriptor.dispatch_queue_url, ReceiptHandle=message["ReceiptHandle"]
                )
        assert len(got) == expected, f"expected {expected} dispatch messages, got {len(got)}"
        for message in got:
            if isinstance(message, DispatchRequest):
                self.requests.append(message)
                self.record(message, SessionState.RUNNING)
            else:
                self.cancels.append(message)
        return got

    def record(self, request: DispatchRequest, state: SessionState) -> None:
        """Write the rollout's sessions item in ``state``, its trainer and deadline as the dispatcher records them
        (a trainer already there, from an ``attach``, is kept)."""
        self.dynamodb.update_item(
            TableName=self.descriptor.sessions_table,
            Key={SESSIONS_PARTITION_KEY: {"S": request.session_id}},
            UpdateExpression="SET #state = :state, #input = :input, #deadline = :deadline, "
            "#trainer = if_not_exists(#trainer, :trainer)",
            ExpressionAttributeNames={
                "#state": ATTR_STATE,
                "#input": ATTR_INPUT_ID,
                "#deadline": ATTR_DEADLINE_AT,
                "#trainer": ATTR_TRAINER,
            },
            ExpressionAttributeValues={
                ":state": {"S": state.value},
                ":input": {"S": request.input_id},
                ":deadline": {"N": str(request.submitted_at + request.timeout_s)},
                ":trainer": {"S": request.trainer or ""},
            },
        )

    def complete(self, request: DispatchRequest) -> RolloutResult:
        """Write the result object of ``request`` (the S3 event reaches the completion queue)."""
        result = self.outcome(request)
        put_result(result)
        self.record(request, SessionState.FINISHED)
        return result

    def serve(self, expected: int) -> list[DispatchRequest]:
        """Receive ``expected`` requests and complete each."""
        requests = [m for m in self.receive(expected) if isinstance(m, DispatchRequest)]
        for request in requests:
            self.complete(request)
        return requests

    def serve_in_thread(self, expected: int) -> threading.Thread:
        """Serve ``expected`` requests from a thread, as they arrive."""

        def run() -> None:
            done = 0
            while done < expected:
                for message in self.receive(1, timeout=30):
                    self.complete(message)
                    done += 1

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    def queue_depth(self) -> int:
        """Messages in the completion queue, visible or not."""
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=self.descriptor.completion_queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(attributes["ApproximateNumberOfMessages"]) + int(attributes["ApproximateNumberOfMessagesNotVisible"])

    def wait_for_depth(self, depth: int, timeout: float = 5.0) -> int:
        """Wait until the completion queue holds ``depth`` messages; return the last depth seen."""
        deadline = time.monotonic() + timeout
        while (current := self.queue_depth()) != depth and time.monotonic() < deadline:
            time.sleep(0.05)
        return current


# Fixtures


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    """A moto server on a free port, for a test that starts a trainer process: it serves the same moto state as the
    test's in-process mock (one process, one set of backends)."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch, shared_sessions: None) -> Iterator[None]:
    """moto in-process for this test, empty at its start, changed as the local stack's server is
    (tests/conftest.py): a missing key is a 403, as S3 answers callers without bucket-wide ``s3:ListBucket``
    (the trainer role)."""
    for name in (
        "AWS_PROFILE",
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_SQS",
        "AWS_ENDPOINT_URL_S3",
        "AWS_ENDPOINT_URL_SSM",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        yield


@pytest.fixture
def descriptor() -> ExperimentDescriptor:
    return create_experiment()


@pytest.fixture
def fast_poll() -> PollSettings:
    return FAST_POLL


@pytest.fixture
def backend(descriptor: ExperimentDescriptor) -> Backend:
    return Backend(descriptor)


@pytest.fixture
def client(descriptor: ExperimentDescriptor) -> Iterator[RolloutClient]:
    with RolloutClient.from_descriptor(descriptor, poll=FAST_POLL) as client:
        yield client


@contextlib.contextmanager
def served(app: Any) -> Iterator[str]:
    """Serve an ASGI ``app`` with uvicorn on a free port of 127.0.0.1 in a thread; yield its URL."""
    import uvicorn

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
