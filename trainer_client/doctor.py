"""``rollouts doctor EXP``: check every hop of an experiment in order and say which one is broken.

The same code checks a deployed experiment and the local stack: everything is found through the
experiment's descriptor in SSM, and boto3 clients use the descriptor's ``endpoints`` (empty in AWS).

Each check is a function ``(Experiment) -> CheckResult``; :data:`CHECKS` lists them in hop order, so a new
check is one function added there. A check that gets an AWS error fails with that error, it never raises.
With a canary payload, :func:`trace_canary` then runs one real rollout and reports each hop (queued,
dispatched, invoked, result written, event received, future resolved) with its latency, taken from the
timestamps the system records: ``_rollout`` submit and dispatch times and the agent's start and end times
in the result, the result event's SQS ``SentTimestamp``, the sessions table's state.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import CancelledError
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any, TextIO

from botocore.exceptions import BotoCoreError
from botocore.exceptions import ClientError as BotoClientError

from rollout_contract import ExperimentDescriptor, ExperimentResources, Status, validate_experiment
from rollout_contract.aws import ClientFactory, Clients, Service, error_code, error_message
from rollout_contract.credentials import SecretReadError
from rollout_contract.protocol import RUNTIME_READY, runtime_id
from rollout_contract.resources import FUNCTION_ROLES, QUEUE_LABELS, SESSIONS_PARTITION_KEY, result_event_pattern
from rollout_contract.sessions import ATTR_ATTEMPTS, ATTR_STATE, SessionState
from trainer_client._aws import load_descriptor
from trainer_client._client import RolloutClient
from trainer_client._config import PollSettings, RolloutOptions
from trainer_client._exceptions import AwsError, ExperimentNotFoundError, SubmitError
from trainer_client._stored import is_stored
from trainer_client._tinker import probe_tinker
from trainer_client.quotas import Quotas, agentcore_quotas, endpoints_buy, shortfalls

if TYPE_CHECKING:
    from types_boto3_cloudwatch import CloudWatchClient
    from types_boto3_events.type_defs import DescribeRuleResponseTypeDef
    from types_boto3_sqs.literals import QueueAttributeFilterType, QueueAttributeNameType
    from types_boto3_ssm import SSMClient

__all__ = [
    "CHECKS",
    "CheckResult",
    "Experiment",
    "check_descriptor",
    "diagnose",
    "policy_lets_rule_send",
    "run_doctor",
    "trace_canary",
]

#: How far back the functions' errors and throttles are summed.
RECENT = timedelta(minutes=15)
#: How long after a canary's deadline the doctor waits for the sweeper's ``timed_out`` (it runs every minute).
SWEEPER_GRACE_S = 75.0
#: How often the canary re-reads its sessions-table item while it waits.
CANARY_POLL_S = 1.0
EVENTS_PRINCIPAL = "events.amazonaws.com"
LAMBDA_NAMESPACE = "AWS/Lambda"


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One line of the doctor's report.

    Attributes:
        name: what was checked ("result rule", "queue dispatch", "canary: invoked", ...).
        ok: whether it passed.
        detail: what was found.
        fix: what to do about a failure (or, with ``warn``, what to check by hand).
        warn: it passed only because it could not be checked (``WARN``): the fix says how to check by hand.
    """

    name: str
    ok: bool
    detail: str
    fix: str = ""
    warn: bool = False

    def line(self) -> str:
        """The report line: ``PASS|WARN|FAIL  name  detail [-> fix]``."""
        label = "FAIL" if not self.ok else "WARN" if self.warn else "PASS"
        text = f"{label}  {self.name:<26} {self.detail}"
        return f"{text} -> {self.fix}" if (not self.ok or self.warn) and self.fix else text


@dataclass
class Experiment:
    """What the checks read: the experiment's descriptor, resource names and boto3 clients."""

    descriptor: ExperimentDescriptor
    clients: Clients = field(default_factory=Clients)

    @classmethod
    def connect(cls, descriptor: ExperimentDescriptor) -> Experiment:
        """Build clients for the descriptor's region and endpoints (the local stack's, or AWS's)."""
        factory = ClientFactory(region=descriptor.region, endpoints=descriptor.endpoints, read_timeout_s=30)
        services: tuple[Service, ...] = (
            "sqs",
            "s3",
            "events",
            "bedrock-agentcore-control",
            "cloudwatch",
            "dynamodb",
            "service-quotas",
        )
        return cls(descriptor, factory.clients(*services))

    @property
    def resources(self) -> ExperimentResources:
        """The experiment's resource names."""
        return self.descriptor.resources

    @property
    def is_local(self) -> bool:
        """Whether the descriptor points at the local stack."""
        return bool(self.descriptor.endpoints)

    @property
    def redeploy(self) -> str:
        """How to recreate the experiment's resources."""
        if self.is_local:
            return "restart the local stack: rollouts local down && rollouts local up"
        return f"redeploy: npx cdk deploy -c experiment={self.descriptor.exp_id}"

    def queue_url(self, name: str) -> str:
        """URL of queue ``name`` (raises ``ClientError`` if it does not exist)."""
        return self.clients["sqs"].get_queue_url(QueueName=name)["QueueUrl"]

    def queue_attributes(self, name: str, *attributes: QueueAttributeFilterType) -> dict[QueueAttributeNameType, str]:
        """Attributes of queue ``name``."""
        return self.clients["sqs"].get_queue_attributes(QueueUrl=self.queue_url(name), AttributeNames=list(attributes))[
            "Attributes"
        ]

    @cached_property
    def rule(self) -> DescribeRuleResponseTypeDef:
        """The result rule as ``DescribeRule`` returns it."""
        return self.clients["events"].describe_rule(Name=self.resources.result_rule_name)


Check = Callable[[Experiment], CheckResult]


# Queues, their dead-letter queues and the policies EventBridge needs.


def queue_check(role: str) -> Check:
    """Check that the ``role`` queue exists and redrives to its dead-letter queue."""

    name = f"queue {role}"

    def check(exp: Experiment) -> CheckResult:
        spec = exp.resources.queues[role]
        missing = _missing_queues(exp, spec.name, spec.dlq_name)
        if missing:
            return CheckResult(name, False, f"{', '.join(missing)} does not exist", exp.redeploy)
        dlq_arn = exp.queue_attributes(spec.dlq_name, "QueueArn")["QueueArn"]
        redrive = json.loads(exp.queue_attributes(spec.name, "RedrivePolicy").get("RedrivePolicy") or "{}")
        if redrive.get("deadLetterTargetArn") != dlq_arn:
            found = redrive.get("deadLetterTargetArn") or "no redrive policy"
            return CheckResult(name, False, f"{spec.name} does not redrive to {spec.dlq_name} ({found})", exp.redeploy)
        return CheckResult(
            name, True, f"{spec.name} -> {spec.dlq_name} after {redrive.get('maxReceiveCount')} receives"
        )

    return _named(check, name)


def _missing_queues(exp: Experiment, *names: str) -> list[str]:
    missing = []
    for queue in names:
        try:
            exp.queue_url(queue)
        except BotoClientError as exc:
            if not error_code(exc).endswith(("NonExistentQueue", "QueueDoesNotExist")):
                raise
            missing.append(queue)
    return missing


def queue_policy_check(role: str) -> Check:
    """Check that the ``role`` queue's policy lets the result rule send to it."""

    name = f"queue policy {role}"

    def check(exp: Experiment) -> CheckResult:
        spec = exp.resources.queues[role]
        attributes = exp.queue_attributes(spec.name, "QueueArn", "Policy")
        rule_arn = exp.rule["Arn"]
        policy = json.loads(attributes.get("Policy") or "{}")
        if policy_lets_rule_send(policy, attributes["QueueArn"], rule_arn):
            return CheckResult(name, True, f"EventBridge rule {exp.resources.result_rule_name} may send to {spec.name}")
        return CheckResult(
            name,
            False,
            f"no statement of {spec.name}'s policy lets {EVENTS_PRINCIPAL} (rule {exp.resources.result_rule_name}) "
            "sqs:SendMessage: result events are dropped",
            exp.redeploy,
        )

    return _named(check, name)


def policy_lets_rule_send(policy: Mapping[str, Any], queue_arn: str, rule_arn: str) -> bool:
    """Whether a queue policy document lets EventBridge rule ``rule_arn`` send to the queue ``queue_arn``."""
    return any(_lets_rule_send(statement, queue_arn, rule_arn) for statement in _statements(policy))


def _statements(policy: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    statements = policy.get("Statement", [])
    return [statements] if isinstance(statements, Mapping) else list(statements)


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _lets_rule_send(statement: Mapping[str, Any], queue_arn: str, rule_arn: str) -> bool:
    principal = statement.get("Principal", {})
    services = _as_list(principal.get("Service", [])) if isinstance(principal, Mapping) else []
    actions = _as_list(statement.get("Action", []))
    resources = _as_list(statement.get("Resource", "*"))
    source_arns = [
        arn
        for operator in ("ArnEquals", "ArnLike", "StringEquals", "StringLike")
        for arn in _as_list(statement.get("Condition", {}).get(operator, {}).get("aws:SourceArn", []))
    ]
    return (
        statement.get("Effect") == "Allow"
        and (principal == "*" or EVENTS_PRINCIPAL in services)
        and any(action in ("sqs:SendMessage", "sqs:*", "*") for action in actions)
        and any(resource in (queue_arn, "*") for resource in resources)
        and (not source_arns or rule_arn in source_arns)
    )


# Bucket, rule and runtime.


def check_bucket_events(exp: Experiment) -> CheckResult:
    """The results bucket sends its object events to EventBridge."""
    bucket = exp.descriptor.results_bucket
    configuration = exp.clients["s3"].get_bucket_notification_configuration(Bucket=bucket)
    if "EventBridgeConfiguration" in configuration:
        return CheckResult("bucket events", True, f"{bucket} sends object events to EventBridge")
    return CheckResult(
        "bucket events",
        False,
        f"{bucket} does not send object events to EventBridge: no result event is ever emitted",
        "turn on the bucket's EventBridge notifications: redeploy the shared stack (npx cdk deploy)"
        if not exp.is_local
        else "restart the local stack: rollouts local down && rollouts local up",
    )


def check_result_rule(exp: Experiment) -> CheckResult:
    """The result rule exists, is enabled and matches the experiment's result keys."""
    name = exp.resources.result_rule_name
    try:
        rule = exp.rule
    except BotoClientError as exc:
        if error_code(exc) != "ResourceNotFoundException":
            raise
        return CheckResult("result rule", False, f"{name} does not exist", exp.redeploy)
    if rule.get("State") != "ENABLED":
        return CheckResult(
            "result rule",
            False,
            f"{name} is {rule.get('State')}: no result event reaches the trainer or the finisher",
            f"enable it: aws events enable-rule --name {name}",
        )
    expected = result_event_pattern(exp.descriptor.results_bucket, exp.descriptor.exp_id)
    if json.loads(rule.get("EventPattern") or "{}") != expected:
        return CheckResult(
            "result rule", False, f"{name} matches {rule.get('EventPattern')}, not {json.dumps(expected)}", exp.redeploy
        )
    return CheckResult(
        "result rule", True, f"{name} is ENABLED for s3://{exp.descriptor.results_bucket}/{exp.descriptor.exp_id}/"
    )


def check_rule_targets(exp: Experiment) -> CheckResult:
    """The result rule targets both the completion queue and the finisher queue."""
    name = exp.resources.result_rule_name
    targets = exp.clients["events"].list_targets_by_rule(Rule=name)["Targets"]
    arns = {target["Arn"] for target in targets}
    wanted = {role: exp.resources.queues[role].name for role in ("completion", "finisher")}
    missing = [queue for queue in wanted.values() if exp.queue_attributes(queue, "QueueArn")["QueueArn"] not in arns]
    if missing:
        found = f"{name} does not target {', '.join(missing)} (it targets {sorted(arns) or 'nothing'})"
        return CheckResult("rule targets", False, found, exp.redeploy)
    return CheckResult("rule targets", True, f"{name} -> {', '.join(wanted.values())}")


def check_gateway(exp: Experiment) -> CheckResult:
    """The token gateway asks who is calling (D100): an admin route refuses a caller without a key and takes the
    experiment's admin key (the README's network isolation is the second layer, not the only one)."""
    url = (exp.descriptor.gateway_url or "").rstrip("/")
    if not url:
        return CheckResult("gateway", True, "the experiment names no token gateway (agents call their base_url)")
    import httpx

    from trainer_client._gateway_auth import GatewayAuth

    secrets = ClientFactory(region=exp.descriptor.region, endpoints=exp.descriptor.endpoints).client("secretsmanager")
    start = f"run it as `python -m trainer_client.gateway --experiment {exp.descriptor.exp_id}` on a host whose role "
    try:
        anonymous = httpx.get(url + "/admin/workers", timeout=10).status_code
        trainer = httpx.get(
            url + "/admin/workers", timeout=10, auth=GatewayAuth.admin(secrets, exp.descriptor.exp_id)
        ).status_code
    except httpx.HTTPError as exc:
        return CheckResult(
            "gateway", False, f"{url} did not answer ({type(exc).__name__}: {exc})", start + "is the trainer role"
        )
    except SecretReadError as exc:
        return CheckResult("gateway", False, str(exc), exp.redeploy)
    if anonymous != 401:
        found = (
            f"{url} answers GET /admin/workers without a key (HTTP {anonymous}): anything that reaches it can send "
            "every agent's model calls to a server of its choosing and read every session's tokens"
        )
        return CheckResult("gateway", False, found, start + "is the trainer role")
    if trainer != 200:
        found = f"{url} refuses the experiment's admin key (HTTP {trainer})"
        return CheckResult("gateway", False, found, start + "may read the experiment's gateway secrets")
    return CheckResult("gateway", True, f"{url} refuses callers without a key and takes the experiment's admin key")


def check_runtime(exp: Experiment) -> CheckResult:
    """The agent runtime exists and is READY (control plane ``GetAgentRuntime``)."""
    arn = exp.descriptor.runtime_arn
    try:
        runtime = exp.clients["bedrock-agentcore-control"].get_agent_runtime(agentRuntimeId=runtime_id(arn))
    except BotoClientError as exc:
        if error_code(exc) != "ResourceNotFoundException":
            raise
        message = error_message(exc)
        return CheckResult("runtime", False, f"{arn} not found: {message}", exp.redeploy)
    status = runtime.get("status")
    if status != RUNTIME_READY:
        reason = f" ({runtime['failureReason']})" if runtime.get("failureReason") else ""
        return CheckResult(
            "runtime",
            False,
            f"{arn} is {status}{reason}",
            "wait for READY if it is CREATING or UPDATING; otherwise fix the reason and " + exp.redeploy,
        )
    return CheckResult("runtime", True, f"{arn} is {status} (version {runtime.get('agentRuntimeVersion')})")


def check_quotas(exp: Experiment) -> CheckResult:
    """The account's AgentCore quotas (Service Quotas) hold the experiment's budgets; what its K endpoints buy.

    The local stack has no Service Quotas (its emulator enforces the descriptor's budgets), and the trainer role
    is not granted Service Quotas' reads: then the quotas are unknown and ACR's published defaults stand in.
    """
    descriptor = exp.descriptor
    listed = not exp.is_local or "service-quotas" in descriptor.endpoints
    quotas, where = Quotas(), "the local stack has no Service Quotas"
    if listed:
        where = f"not listed in {descriptor.region}"
        try:
            quotas = Quotas.find(agentcore_quotas(exp.clients["service-quotas"]))
        except BotoClientError as exc:
            if "AccessDenied" not in error_code(exc):
                raise
            where = "these credentials may not read Service Quotas (servicequotas:List*)"
    short = shortfalls(quotas, session_budget=descriptor.session_budget, tps_limit=descriptor.tps_limit)
    ok, detail, check = endpoints_buy(
        quotas, endpoints=descriptor.runtime_endpoints, session_budget=descriptor.session_budget, where=where
    )
    if short:
        fix = "request an increase in the Service Quotas console, or lower the budgets and " + exp.redeploy
        return CheckResult("quotas", False, "; ".join(short), fix)
    return CheckResult("quotas", ok, detail, check, warn=ok and bool(check) and listed)


# The functions' recent errors and throttles, and the dead-letter queues.


def function_check(role: str) -> Check:
    """Check that the ``role`` function had no errors and no throttles in the last :data:`RECENT`."""

    name = f"function {role}"

    def check(exp: Experiment) -> CheckResult:
        function = exp.descriptor.function_names.get(role)
        if function is None:
            found = "the descriptor names no function (it was published before the doctor existed)"
            return CheckResult(name, False, found, exp.redeploy)
        sums = _metric_sums(exp.clients["cloudwatch"], function, ("Invocations", "Errors", "Throttles"))
        minutes = int(RECENT.total_seconds() // 60)
        found = (
            f"{function}: {sums['Errors']:g} errors, {sums['Throttles']:g} throttles, "
            f"{sums['Invocations']:g} invocations in the last {minutes} min"
        )
        if sums["Errors"] or sums["Throttles"]:
            # The functions log to groups CloudFormation names; descriptors older than ``log_groups`` name none.
            group = exp.descriptor.log_groups.get(role) or f"/aws/lambda/{function}"
            logs = (
                f"the worker logs worker-{exp.descriptor.exp_id}*.log in the local stack's run directory"
                if exp.is_local
                else f"aws logs tail {group} --since {minutes}m"
            )
            fix = f"read {logs}" + ("; throttles: raise its concurrency" if sums["Throttles"] else "")
            return CheckResult(name, False, found, fix)
        return CheckResult(name, True, found)

    return _named(check, name)


def _metric_sums(cloudwatch: CloudWatchClient, function: str, metrics: tuple[str, ...]) -> dict[str, float]:
    end = datetime.now(UTC)
    queries = [
        {
            "Id": f"m{index}",
            "MetricStat": {
                "Metric": {
                    "Namespace": LAMBDA_NAMESPACE,
                    "MetricName": metric,
                    "Dimensions": [{"Name": "FunctionName", "Value": function}],
                },
                "Period": 60,
                "Stat": "Sum",
            },
        }
        for index, metric in enumerate(metrics)
    ]
    sums = dict.fromkeys(metrics, 0.0)
    request: dict[str, Any] = {"MetricDataQueries": queries, "StartTime": end - RECENT, "EndTime": end}
    while True:
        page = cloudwatch.get_metric_data(**request)
        for series in page["MetricDataResults"]:
            sums[metrics[int(series["Id"][1:])]] += sum(series.get("Values", []))
        if not page.get("NextToken"):
            return sums
        request["NextToken"] = page["NextToken"]


def dead_letter_check(role: str) -> Check:
    """Check that the ``role`` queue's dead-letter queue is empty."""

    name = f"dead letters {role}"

    def check(exp: Experiment) -> CheckResult:
        spec = exp.resources.queues[role]
        attributes = exp.queue_attributes(
            spec.dlq_name, "QueueArn", "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"
        )
        depth = sum(
            int(attributes[a]) for a in ("ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible")
        )
        if depth:
            return CheckResult(
                name,
                False,
                f"{depth} message(s) in {spec.dlq_name}",
                f"read them (aws sqs receive-message --queue-url {exp.queue_url(spec.dlq_name)}), fix the cause, then "
                f"move them back (aws sqs start-message-move-task --source-arn {attributes['QueueArn']}) or purge",
            )
        return CheckResult(name, True, f"{spec.dlq_name} is empty")

    return _named(check, name)


def _named(check: Check, name: str) -> Check:
    check.__name__ = name
    return check


#: Every check after the descriptor, in hop order.
CHECKS: tuple[Check, ...] = (
    *(queue_check(role) for role in QUEUE_LABELS),
    *(queue_policy_check(role) for role in ("completion", "finisher")),
    check_bucket_events,
    check_result_rule,
    check_rule_targets,
    check_gateway,
    check_runtime,
    check_quotas,
    *(function_check(role) for role in FUNCTION_ROLES),
    *(dead_letter_check(role) for role in QUEUE_LABELS),
)


def _failed_call(exp_id: str, name: str, exc: Exception) -> CheckResult:
    """A check that an AWS error (or a bad descriptor) stopped: say what AWS said and what to do."""
    code = error_code(exc) if isinstance(exc, BotoClientError) else getattr(exc, "code", "")
    if not code:
        return CheckResult(name, False, f"{type(exc).__name__}: {exc}", "check the endpoint is reachable and retry")
    if "AccessDenied" in code or code == "UnauthorizedOperation":
        stack = ExperimentResources.for_experiment(exp_id).stack_name
        fix = f"use the trainer role (output TrainerRoleArn of stack {stack}; README 'Deploying to AWS', step 5)"
        return CheckResult(name, False, f"{code}: {exc}", fix)
    return CheckResult(name, False, f"{code}: {exc}", "retry; if it persists, check the service's health")


def _check_name(check: Check) -> str:
    return getattr(check, "__name__", "check").removeprefix("check_").replace("_", " ")


def check_descriptor(
    exp_id: str, *, region: str | None = None, ssm: SSMClient | None = None
) -> tuple[CheckResult, Experiment | None]:
    """Read the experiment's descriptor from SSM; return the result and, if readable, the connected experiment."""
    exp_id = validate_experiment(exp_id)
    parameter = ExperimentResources.for_experiment(exp_id).descriptor_parameter
    try:
        descriptor = load_descriptor(exp_id, region=region, ssm=ssm)
    except ExperimentNotFoundError:
        return CheckResult(
            "descriptor",
            False,
            f"no SSM parameter {parameter}",
            f"deploy: npx cdk deploy -c experiment={exp_id}, or start the local stack: rollouts local up",
        ), None
    except (AwsError, ValueError) as exc:
        return _failed_call(exp_id, "descriptor", exc), None
    where = "local stack" if descriptor.endpoints else f"region {descriptor.region}"
    found = CheckResult("descriptor", True, f"{parameter} ({where}, runtime {descriptor.runtime_arn})")
    return found, Experiment.connect(descriptor)


def diagnose(exp: Experiment) -> Iterator[CheckResult]:
    """Run every check in :data:`CHECKS` in order, yielding each result as it is known (AWS errors fail a check),
    then the Tinker endpoint's when the environment names one (``TINKER_BASE_URL`` or ``TINKER_API_KEY``)."""
    for check in CHECKS:
        try:
            yield check(exp)
        except (BotoClientError, BotoCoreError) as exc:
            yield _failed_call(exp.descriptor.exp_id, _check_name(check), exc)
    tinker = probe_tinker()
    if tinker is not None:
        yield CheckResult("tinker", *tinker)


# The canary: one real rollout, hop by hop.


@dataclass
class _Watch:
    """What the canary saw while it waited: the sessions-table states and when the future resolved."""

    states: set[str] = field(default_factory=set)
    attempts: int | None = None
    resolved_at: float | None = None


def trace_canary(
    exp: Experiment,
    payload: dict[str, Any],
    *,
    input_id: str | None = None,
    timeout_s: float = 120.0,
    model_id: str | None = None,
) -> Iterator[CheckResult]:
    """Run one rollout of ``payload`` (deadline ``timeout_s``, ``_rollout.model_id`` if given) and report each hop
    in order with its latency.

    Hops are reported until the first one that did not happen; a canary that does not end within the
    deadline plus :data:`SWEEPER_GRACE_S` is cancelled.
    """
    watch = _Watch()
    with RolloutClient.from_descriptor(exp.descriptor, poll=PollSettings(wait_time_s=5)) as client:
        began = time.time()
        try:
            overrides: RolloutOptions = {"model_id": model_id} if model_id else {}
            future = client.invoke(payload, input_id=input_id, timeout=timeout_s, **overrides)
        except SubmitError as exc:
            yield _hop("queued", False, str(exc), "check the dispatch queue line above and the trainer role")
            return
        sent = time.time()
        future.add_done_callback(lambda _: setattr(watch, "resolved_at", time.time()))
        yield _hop("queued", True, f"session {future.session_id} on the dispatch queue", latency=sent - began)
        key = future.result_key
        deadline = time.monotonic() + timeout_s + SWEEPER_GRACE_S
        while not future.done() and time.monotonic() < deadline:
            try:
                future.result(timeout=CANARY_POLL_S, cancel_on_timeout=False)
            except (FutureTimeout, CancelledError):
                pass
            except Exception:  # noqa: BLE001 - a failed future is reported below like a missing result
                break
            _read_session(exp, future.session_id, watch)
        if not future.done() or future.exception() is not None:
            if not future.done():
                future.cancel()
            yield from _stuck(exp, key, watch, timeout_s)
            return
        yield from _hops(future.result(), future.event_sent_at, watch, timeout_s, submitted=began)


def _hop(name: str, ok: bool, detail: str, fix: str = "", *, latency: float | None = None) -> CheckResult:
    took = "" if latency is None else f" (+{latency * 1000:.0f} ms)" if latency < 10 else f" (+{latency:.1f} s)"
    return CheckResult(f"canary {name}", ok, f"{detail}{took}", fix)


def _read_session(exp: Experiment, session_id: str, watch: _Watch) -> None:
    key = {SESSIONS_PARTITION_KEY: {"S": session_id}}
    try:
        item = (
            exp.clients["dynamodb"]
            .get_item(TableName=exp.descriptor.sessions_table, Key=key, ConsistentRead=True)
            .get("Item")
        )
    except (BotoClientError, BotoCoreError):
        return
    if item and ATTR_STATE in item:
        watch.states.add(item[ATTR_STATE]["S"])
        watch.attempts = int(item[ATTR_ATTEMPTS]["N"]) if ATTR_ATTEMPTS in item else watch.attempts


def _hops(
    result: Any, event_sent_at: float | None, watch: _Watch, timeout_s: float, *, submitted: float
) -> Iterator[CheckResult]:
    t = result.timings
    if t.dispatched_at is None:
        yield _hop(
            "dispatched",
            False,
            f"ended {result.status.value} before a dispatcher took it: {_error(result)}",
            "check the dispatcher's function line and the session budget",
        )
        return
    yield _hop(
        "dispatched",
        True,
        "a dispatcher took a session slot and an invoke token",
        latency=t.dispatched_at - (t.submitted_at or submitted),
    )
    if result.status is Status.DISPATCH_FAILED:
        yield _hop(
            "invoked",
            False,
            f"InvokeAgentRuntime failed: {_error(result)}",
            "check the runtime line above and the agent image",
        )
        return
    invoked = t.started_at is not None or SessionState.RUNNING.value in watch.states
    if not invoked:
        found = f"the runtime never accepted the invoke; ended {result.status.value}: {_error(result)}"
        yield _hop("invoked", False, found, "check the runtime line above and the dispatcher's logs")
        return
    started = None if t.started_at is None else t.started_at - t.dispatched_at
    yield _hop(
        "invoked",
        True,
        "the runtime accepted the invoke, the agent's handler started"
        if started is not None
        else "the runtime accepted the invoke",
        latency=started,
    )
    if result.status is Status.TIMED_OUT:
        yield _hop(
            "result written",
            False,
            f"the agent wrote no result within the {timeout_s:g} s deadline "
            "(the sweeper ended the rollout as timed_out)",
            "read the agent's logs: its handler must return or raise before the deadline",
        )
        return
    if result.status is not Status.SUCCEEDED:
        yield _hop(
            "result written",
            False,
            f"the agent's result is {result.status.value}: {_error(result)}",
            "fix the agent or give a payload it succeeds on",
        )
        return
    ran = None if t.started_at is None or t.finished_at is None else t.finished_at - t.started_at
    yield _hop("result written", True, f"{result.result_key} (reward {result.reward})", latency=ran)
    if event_sent_at is None:
        yield _hop("event received", True, "the result event reached the trainer (no SentTimestamp)")
    else:
        yield _hop(
            "event received",
            True,
            "the result event reached the completion queue",
            latency=event_sent_at - t.finished_at if t.finished_at else None,
        )
    resolved = watch.resolved_at
    since = event_sent_at or t.finished_at
    yield _hop(
        "future resolved",
        True,
        f"the trainer's future holds the result, {_total(resolved, submitted)} after submit",
        latency=None if resolved is None or since is None else resolved - since,
    )


def _total(resolved: float | None, submitted: float) -> str:
    return "?" if resolved is None else f"{resolved - submitted:.2f} s"


def _error(result: Any) -> str:
    return f"{result.error.type}: {result.error.message}" if result.error else "no error recorded"


def _stuck(exp: Experiment, key: str | None, watch: _Watch, timeout_s: float) -> Iterator[CheckResult]:
    """Report where a canary that never resolved stopped (its future was cancelled)."""
    waited = f"{timeout_s + SWEEPER_GRACE_S:g} s"
    written = key is not None and _result_exists(exp, key)
    if not written and not watch.states:
        yield _hop(
            "dispatched",
            False,
            f"no dispatcher recorded the rollout within {waited} (a start that waits in the dispatcher for a free "
            "session slot is recorded only when its wait runs out)",
            "check the dispatcher's function line, the dispatch queue and its dead letters above, and whether "
            "every session slot is taken (`rollouts status`)",
        )
        return
    if not written and SessionState.RUNNING.value not in watch.states:
        yield _hop("dispatched", True, f"recorded ({', '.join(sorted(watch.states))})")
        yield _hop(
            "invoked",
            False,
            f"InvokeAgentRuntime did not succeed within {waited} (attempts {watch.attempts})",
            "check the runtime line above and the dispatcher's logs",
        )
        return
    yield _hop("dispatched", True, "a dispatcher took a session slot and an invoke token")
    yield _hop("invoked", True, "the runtime accepted the invoke")
    if not written:
        yield _hop(
            "result written",
            False,
            f"no result within {waited}, not even the sweeper's timed_out",
            "check the sweeper's function line above, then the agent's logs",
        )
        return
    yield _hop("result written", True, f"{key}")
    yield _hop(
        "event received",
        False,
        f"the result is in S3 but no event reached the trainer within {waited}",
        "check the bucket events, result rule, rule targets and queue policy lines above",
    )


def _result_exists(exp: Experiment, key: str) -> bool:
    """Whether the result is stored (a list of the key: the trainer role gets 403, not 404, for a missing key)."""
    return is_stored(exp.clients["s3"], exp.descriptor.results_bucket, key)


def _reported(hops: Iterator[CheckResult], exp_id: str) -> Iterator[CheckResult]:
    """The canary's hops; an AWS error while tracing it ends them with a FAIL line instead of a traceback."""
    try:
        yield from hops
    except (BotoClientError, BotoCoreError, AwsError) as exc:
        yield _failed_call(exp_id, "canary", exc)


def run_doctor(
    exp_id: str,
    *,
    region: str | None = None,
    canary: dict[str, Any] | None = None,
    input_id: str | None = None,
    timeout_s: float = 120.0,
    model_id: str | None = None,
    out: TextIO,
    as_json: bool = False,
) -> bool:
    """Print one line per check, then per canary hop, to ``out`` as each is known; return whether all passed.

    Without a readable descriptor nothing else can be found, so the run stops there. ``as_json`` prints each
    result as one JSON object (``name``, ``ok``, ``detail``, ``fix``) instead.
    """

    def report(result: CheckResult) -> None:
        print(json.dumps(dataclasses.asdict(result)) if as_json else result.line(), file=out, flush=True)

    first, experiment = check_descriptor(exp_id, region=region)
    report(first)
    if experiment is None:
        return False
    ok = True
    hops = (
        _reported(trace_canary(experiment, canary, input_id=input_id, timeout_s=timeout_s, model_id=model_id), exp_id)
        if canary is not None
        else ()
    )
    for result in itertools.chain(diagnose(experiment), hops):
        report(result)
        ok = ok and result.ok
    return ok
