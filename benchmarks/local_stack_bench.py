"""Benchmark the local stack end to end: event-driven completion vs ART's S3 HEAD polling, and every AWS call.

For each rollout kind (about 1 s and about 10 s; the stand-in model's simulated latency sets the length, two
model calls per rollout) a fresh :class:`local_stack.stack.LocalStack` runs ``--rollouts`` rollouts of the
example math agent through the whole pipeline (trainer -> dispatch queue -> dispatcher -> ACR emulator ->
agent -> S3 -> EventBridge -> completion queue -> the trainer's poller). Printed:

1. Completion latency, result written -> future resolved: ``timings.finished_at`` (set by the agent right
   before its conditional put) to a done-callback timestamp on the trainer's future; p50 / p99. The future
   resolves after the poller read the object and joined the gateway's token traces, as in training
   (``--no-traces``: agents call the model directly and no trace is joined).
2. The baseline, ART's completion detection, measured in the same run against the same S3: a thread per
   rollout HEAD-polls its result key (at t=0, then intervals x1.5 from 0.75 s, capped at 30 s) alongside
   the event path, consuming no queue message; detection latency (result written -> a HEAD sees it)
   p50 / p99, HEADs per rollout, and the ratio event latency / polling latency.
3. AWS calls per rollout across the whole system, by service and operation and by caller, from moto's
   request recorder (``/moto-api/recorder/*``: one JSON record per request every process sent). Callers
   are told apart by the botocore user-agent app id: the trainer's and the baseline's clients set one,
   the Lambda workers inherit ``AWS_SDK_UA_APP_ID`` from this process, agents (scrubbed environment) have
   none. The baseline's HEADs are counted apart. Calls signed with the key of an AWS service the twin plays
   (``local_stack.moto_server.AWS_SERVICE_COMPONENTS``: Lambda's metrics, the handlers' EMF lines put as
   CloudWatch Logs would, the alarms read as CloudWatch evaluates them, ACR's metrics) are counted apart too: in
   AWS those services make them, not us. ACR data-plane calls come from the emulator's ``GET /_admin/stats``
   counters.

Run: ``.venv/bin/python benchmarks/local_stack_bench.py [--rollouts 16] [--concurrency 4] [--kinds 1s,10s]
[--short-latency 0] [--long-latency 4.75] [--no-traces]``. Rollouts are submitted one by one with at most
``--concurrency`` in flight (on 2 cores more agents at once stretch "1 s" rollouts to several seconds). About
75 s with the defaults on 2 cores; every process listens on 127.0.0.1 only; logs under
``.local-stack/bench-<kind>/``, with moto's recording in ``moto-recording.jsonl``.
"""

from __future__ import annotations

import argparse
import base64
import json
import re
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import parse_qs, urlsplit

import _results as results
import boto3
import httpx
from botocore.config import Config
from botocore.exceptions import ClientError

import agentcore_rollouts_local  # noqa: F401  (puts local_stack, lambdas, examples on sys.path: D80)
from examples.math_agent.dataset import synthetic
from examples.math_agent.local import MATH_AGENT
from local_stack._process import environment
from local_stack.hosting import DEFAULT_MODEL_NAME
from local_stack.model_endpoint import EndpointSettings
from local_stack.moto_server import AWS_SERVICE_COMPONENTS, DUMMY_CREDENTIALS, LOCAL_ACCESS_KEYS, LOCAL_REGION
from local_stack.stack import DEFAULT_RUN_DIR, LocalStack
from rollout_contract.resources import ExperimentResources
from trainer_client import AwsClients, ClientResult, PollSettings, RolloutClient, RolloutFuture
from trainer_client._status import count_in_flight

EXP_ID = "bench"
MODEL_ID = DEFAULT_MODEL_NAME
#: botocore user-agent app ids (``app/<id>``) that tell the callers apart in moto's recording.
TRAINER_APP_ID = "bench-trainer"
BASELINE_APP_ID = "bench-art-baseline"
LAMBDAS_APP_ID = "bench-lambdas"
#: The benchmark's own reads of the stack (is every rollout finished?), left out of every count.
PROBE_APP_ID = "bench-probe"
TRAINER, BASELINE, LAMBDAS, PROBE = "trainer", "baseline", "lambdas", "probe"
CALLERS = {TRAINER_APP_ID: TRAINER, BASELINE_APP_ID: BASELINE, LAMBDAS_APP_ID: LAMBDAS, PROBE_APP_ID: PROBE}
#: The twin's stand-ins for AWS services, told apart by their access keys (whatever their app id).
AWS_SERVICES = "aws-services"
_SERVICE_KEYS = frozenset(LOCAL_ACCESS_KEYS[component] for component in AWS_SERVICE_COMPONENTS)
#: Callers whose calls are not the pipeline's: the ART baseline's HEADs, the benchmark's own probes, and what the
#: AWS services do themselves.
NOT_THE_SYSTEM = frozenset({BASELINE, PROBE, AWS_SERVICES})
#: Requests with no app id: the agents, whose environment the emulator scrubs.
UNTAGGED_CALLER = "agents"
#: The trainer's calls that serve completion (the rest submit rollouts).
COMPLETION_OPERATIONS = frozenset({"ReceiveMessage", "DeleteMessageBatch", "ChangeMessageVisibilityBatch", "GetObject"})
#: ART's HEAD schedule: first poll at once, then sleep 0.75 s, x1.5 per poll, at most 30 s.
ART_FIRST_INTERVAL_S = 0.75
ART_BACKOFF = 1.5
ART_MAX_INTERVAL_S = 30.0
#: Seconds to wait, after the last future resolved, for the finisher to stop the last sessions.
STOP_WAIT_S = 15.0
#: Seconds after a rollout's deadline within which the sweeper's ``timed_out`` result resolves its future.
RESULT_GRACE_S = 30.0
#: The emulator's data-plane counters shown per rollout.
ACR_COUNTERS = ("invokes", "stops", "throttles", "quota_rejections")
_APP_ID_RE = re.compile(r"\bapp/(\S+)")
_SCOPE_RE = re.compile(r"Credential=([^/]+)/\d{8}/[^/]+/([^/]+)/aws4_request")
_SPACE_RE = re.compile(r"\s*")


@dataclass(frozen=True)
class RolloutKind:
    """One rollout length to measure: its name (``--kinds``, run dir), label and the model's latency per call."""

    name: str
    label: str
    model_latency_s: float


@dataclass(frozen=True)
class BenchSettings:
    """What the benchmark runs (the command line's flags)."""

    kinds: tuple[RolloutKind, ...]
    rollouts: int
    concurrency: int
    timeout_s: float
    run_dir: Path
    traces: bool


class PollOutcome(NamedTuple):
    """What one ART-style HEAD poller saw: when a HEAD first found the result (Unix time) and its HEAD count."""

    seen_at: float | None
    heads: int


class Call(NamedTuple):
    """One AWS request moto recorded."""

    caller: str
    service: str
    operation: str


@dataclass
class KindReport:
    """What one rollout kind measured."""

    kind: RolloutKind
    rollouts: int
    statuses: Counter[str] = field(default_factory=Counter)
    agent_s: list[float] = field(default_factory=list)
    event_s: list[float] = field(default_factory=list)
    polling_s: list[float] = field(default_factory=list)
    heads: list[int] = field(default_factory=list)
    calls: Counter[Call] = field(default_factory=Counter)
    acr: Counter[str] = field(default_factory=Counter)
    window_s: float = 0.0
    startup_s: float = 0.0

    def per_rollout(self, count: float) -> float:
        """``count`` divided by the number of rollouts."""
        return count / self.rollouts

    def system_calls(self) -> Counter[Call]:
        """Every recorded call except the baseline's HEADs and the benchmark's probes."""
        return Counter({call: n for call, n in self.calls.items() if call.caller not in NOT_THE_SYSTEM})

    def completion_calls(self) -> int:
        """The trainer's calls that detect and read completions (receive, delete, hand back, GetObject)."""
        return sum(
            n for call, n in self.calls.items() if call.caller == TRAINER and call.operation in COMPLETION_OPERATIONS
        )


# ART's completion detection


def poll_like_art(s3: Any, bucket: str, key: str, stop: threading.Event) -> PollOutcome:
    """HEAD ``key`` on ART's schedule until it exists or ``stop`` is set."""
    interval = ART_FIRST_INTERVAL_S
    heads = 0
    while True:
        heads += 1
        try:
            s3.head_object(Bucket=bucket, Key=key)
            return PollOutcome(time.time(), heads)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchKey"):
                raise
        if stop.wait(interval):
            return PollOutcome(None, heads)
        interval = min(interval * ART_BACKOFF, ART_MAX_INTERVAL_S)


# moto's request recorder


class MotoRecorder:
    """moto's request recorder: every request the server receives, as one JSON record each, while recording."""

    def __init__(self, moto_url: str) -> None:
        self._http = httpx.Client(base_url=f"{moto_url}/moto-api/recorder", timeout=30, trust_env=False)

    def start(self) -> None:
        """Erase the recording and start recording."""
        self._call("reset-recording")
        self._call("start-recording")

    def stop(self) -> list[dict[str, Any]]:
        """Stop recording and return the records."""
        self._call("stop-recording")
        text = self._call("download-recording", method="GET")
        self._http.close()
        return list(_json_records(text))

    def _call(self, action: str, method: str = "POST") -> str:
        response = self._http.request(method, f"/{action}")
        response.raise_for_status()
        return response.text


def _json_records(text: str) -> Iterator[dict[str, Any]]:
    """Decode consecutive JSON records (the recorder's threads may interleave a record and its newline)."""
    decoder = json.JSONDecoder()
    position = _SPACE_RE.match(text).end()
    while position < len(text):
        record, position = decoder.raw_decode(text, position)
        position = _SPACE_RE.match(text, position).end()
        yield record


def classify(record: dict[str, Any]) -> Call:
    """Name the caller, service and operation of one recorded request."""
    headers = {name.lower(): value for name, value in record["headers"].items()}
    app_id = _APP_ID_RE.search(headers.get("user-agent", ""))
    caller = CALLERS.get(app_id.group(1), app_id.group(1)) if app_id else UNTAGGED_CALLER
    scope = _SCOPE_RE.search(headers.get("authorization", ""))
    service = scope.group(2) if scope else "unsigned"
    if scope and scope.group(1) in _SERVICE_KEYS:
        caller = AWS_SERVICES
    return Call(caller, service, _operation(record, headers, service))


def _operation(record: dict[str, Any], headers: dict[str, str], service: str) -> str:
    target = headers.get("x-amz-target")
    if target:
        return target.rsplit(".", 1)[-1]
    url = urlsplit(record["url"])
    if "/operation/" in url.path:
        return url.path.rsplit("/", 1)[-1]
    if service == "s3":
        return _s3_operation(record["method"], url.path, url.query, headers)
    body = record.get("body") or ""
    if record.get("body_encoded"):
        body = base64.b64decode(body).decode(errors="replace")
    action = parse_qs(url.query).get("Action") or parse_qs(body).get("Action")
    return action[0] if action else f"{record['method']} {url.path}"


def _s3_operation(method: str, path: str, query: str, headers: dict[str, str]) -> str:
    """S3's REST operation from the method and the path-style URL."""
    has_key = "/" in path.strip("/")
    params = parse_qs(query, keep_blank_values=True)
    if method == "GET" and not has_key:
        return "ListObjectsV2" if params.get("list-type") == ["2"] else "ListObjects"
    if method == "POST" and "delete" in params:
        return "DeleteObjects"
    if method == "PUT" and has_key and "x-amz-copy-source" in headers:
        return "CopyObject"
    names = {"HEAD": "Head", "GET": "Get", "PUT": "Put", "DELETE": "Delete", "POST": "Post"}
    return f"{names.get(method, method)}{'Object' if has_key else 'Bucket'}"


# Running one kind


def run_kind(kind: RolloutKind, settings: BenchSettings) -> KindReport:
    """Start a local stack for ``kind``, measure its rollouts and stop the stack."""
    run_dir = settings.run_dir / f"bench-{kind.name}"
    stack = LocalStack(
        MATH_AGENT.settings(
            run_dir=run_dir,
            experiments=(EXP_ID,),
            model=EndpointSettings(latency_s=kind.model_latency_s),
            session_budget=settings.rollouts,
        )
    )
    started = time.monotonic()
    try:
        recording = (run_dir / "moto-recording.jsonl").resolve()
        with environment({"AWS_SDK_UA_APP_ID": LAMBDAS_APP_ID, "MOTO_RECORDER_FILEPATH": str(recording)}):
            stack.start()
        startup_s = time.monotonic() - started
        report = measure(stack, kind, settings)
        report.startup_s = startup_s
        return report
    finally:
        stack.stop()


def _boto_session() -> boto3.session.Session:
    return boto3.session.Session(
        aws_access_key_id=DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        region_name=LOCAL_REGION,
    )


def _client(service: str, moto_url: str, app_id: str, pool: int) -> Any:
    config = Config(user_agent_appid=app_id, max_pool_connections=pool, retries={"max_attempts": 5, "mode": "standard"})
    return _boto_session().client(service, endpoint_url=moto_url, config=config)


def _trainer_client(stack: LocalStack, clients: AwsClients, poll: PollSettings, *, traces: bool) -> RolloutClient:
    """The trainer's client; without ``traces`` agents call the model directly and no trace is joined."""
    routing = {} if traces else {"gateway_url": None, "base_url": stack.model_url}
    descriptor = stack.descriptors[EXP_ID]
    return RolloutClient.from_descriptor(descriptor, clients=clients, poll=poll, model_id=MODEL_ID, **routing)


def _emulator_counters(stack: LocalStack) -> Counter[str]:
    response = httpx.get(f"{stack.emulator_url}/_admin/stats", timeout=10, trust_env=False)
    response.raise_for_status()
    return Counter(response.json()["counters"])


def _wait_for_stops(stack: LocalStack, before: Counter[str], expected: int) -> None:
    """Wait until the finisher stopped ``expected`` sessions since ``before`` (or :data:`STOP_WAIT_S` passed)."""
    deadline = time.monotonic() + STOP_WAIT_S
    while _emulator_counters(stack)["stops"] - before["stops"] < expected and time.monotonic() < deadline:
        time.sleep(0.2)


def _wait_for_finishes(stack: LocalStack, exp_id: str) -> None:
    """Wait until no rollout of ``exp_id`` holds a session slot (or :data:`STOP_WAIT_S` passed): the finisher's last
    transactions follow its last stops, and the recording must hold them (the reads, the probe's, are counted
    nowhere)."""
    dynamodb = _client("dynamodb", stack.moto_url or "", PROBE_APP_ID, 2)
    resources = ExperimentResources.for_experiment(exp_id)
    deadline = time.monotonic() + STOP_WAIT_S
    while count_in_flight(dynamodb, resources) and time.monotonic() < deadline:
        time.sleep(0.1)


class Tracker:
    """Time-stamps each rollout future's resolution and runs an ART HEAD poller (a thread) beside it.

    A context manager: on exit every poller still running is stopped and joined.

    Args:
        s3: the baseline's S3 client (its HEADs are told apart in the recording by its app id).
        rollouts: how many rollouts will be tracked (one poller thread each).
    """

    def __init__(self, s3: Any, rollouts: int) -> None:
        self._s3 = s3
        self._pollers = ThreadPoolExecutor(rollouts, thread_name_prefix="art-poller")
        self._stop = threading.Event()
        self.futures: list[RolloutFuture] = []
        self.polls: list[Future[PollOutcome]] = []
        self.resolved_at: dict[str, float] = {}

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._pollers.shutdown(wait=True)

    def track(self, future: RolloutFuture) -> None:
        """Follow ``future`` both ways: its done-callback time and an ART poller on its result key."""
        future.add_done_callback(lambda done: self.resolved_at.setdefault(done.session_id, time.time()))
        self.futures.append(future)
        poll = self._pollers.submit(poll_like_art, self._s3, future.s3_bucket, future.result_key, self._stop)
        self.polls.append(poll)

    def finish(self, futures_timeout_s: float) -> list[PollOutcome]:
        """Wait for the futures, give the pollers one full backoff interval to see the last results, stop them."""
        wait(self.futures, timeout=futures_timeout_s)
        wait(self.polls, timeout=ART_MAX_INTERVAL_S + 5)
        self._stop.set()
        return [poll.result() for poll in self.polls]


def submit_windowed(
    client: RolloutClient, items: Sequence[tuple[dict[str, Any], str]], settings: BenchSettings, tracker: Tracker
) -> None:
    """Submit ``items`` one by one with at most ``settings.concurrency`` rollouts in flight."""
    slots = threading.Semaphore(settings.concurrency)
    for item in items:
        if not slots.acquire(timeout=settings.timeout_s + RESULT_GRACE_S):
            raise TimeoutError(f"no rollout ended within {settings.timeout_s:g} s; see the logs in {settings.run_dir}")
        future = client.submit([item], timeout=settings.timeout_s)[0]
        tracker.track(future)
        future.add_done_callback(lambda _: slots.release())


def measure(stack: LocalStack, kind: RolloutKind, settings: BenchSettings) -> KindReport:
    """Run the rollouts with ART's pollers alongside; record every AWS call meanwhile."""
    if stack.moto_url is None:
        raise RuntimeError("the local stack is not started")
    poll = PollSettings()
    trainer = AwsClients(
        sqs=_client("sqs", stack.moto_url, TRAINER_APP_ID, poll.fetch_workers + 2),
        s3=_client("s3", stack.moto_url, TRAINER_APP_ID, poll.fetch_workers + 2),
    )
    baseline_s3 = _client("s3", stack.moto_url, BASELINE_APP_ID, settings.rollouts)
    rows = synthetic(settings.rollouts, seed=0)
    items = [({"prompt": row["prompt"], "answer": row["answer"]}, f"problem-{row['idx']}") for row in rows]
    recorder = MotoRecorder(stack.moto_url)
    acr_before = _emulator_counters(stack)
    recorder.start()
    window_started = time.monotonic()
    client = _trainer_client(stack, trainer, poll, traces=settings.traces)
    with client, Tracker(baseline_s3, settings.rollouts) as tracker:
        submit_windowed(client, items, settings, tracker)
        outcomes = tracker.finish(settings.timeout_s + RESULT_GRACE_S)
        _wait_for_stops(stack, acr_before, settings.rollouts)
        _wait_for_finishes(stack, EXP_ID)
    report = KindReport(kind=kind, rollouts=settings.rollouts, window_s=time.monotonic() - window_started)
    report.calls = Counter(classify(record) for record in recorder.stop())
    report.acr = _emulator_counters(stack) - acr_before
    _add_rollouts(report, tracker.futures, tracker.resolved_at, outcomes)
    return report


def _add_rollouts(
    report: KindReport, futures: Sequence[RolloutFuture], resolved_at: dict[str, float], polls: Sequence[PollOutcome]
) -> None:
    for future, outcome in zip(futures, polls, strict=True):
        report.heads.append(outcome.heads)
        result = _result(future)
        if result is None:
            report.statuses["no result"] += 1
            continue
        report.statuses[result.status.value] += 1
        written = result.timings.finished_at
        if result.timings.duration_s is not None:
            report.agent_s.append(result.timings.duration_s)
        if written is None:
            continue
        report.event_s.append(resolved_at[future.session_id] - written)
        if outcome.seen_at is not None:
            report.polling_s.append(outcome.seen_at - written)


def _result(future: RolloutFuture) -> ClientResult | None:
    if not future.done() or future.cancelled() or future.exception() is not None:
        return None
    return future.result()


# Printing


def pick(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``values`` by nearest rank (``nan`` if empty)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Render rows as aligned columns: numeric columns right-aligned, the others left-aligned."""
    columns = range(len(header))
    widths = [max(len(row[i]) for row in [header, *rows]) for i in columns]
    numeric = [all(row[i][:1].isdigit() or row[i] in ("", "-") for row in rows) for i in columns]

    def line(row: Sequence[str]) -> str:
        return "  ".join(row[i].rjust(widths[i]) if numeric[i] else row[i].ljust(widths[i]) for i in columns).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def _s(value: float) -> str:
    return f"{value:.2f} s"


def _ratio(numerator: float, denominator: float) -> str:
    return f"{numerator / denominator:.2f}" if denominator > 0 else "-"


def render_rollouts(reports: Sequence[KindReport]) -> str:
    """Per kind: rollout outcomes, agent run time, stack start and the measured window."""
    rows = [
        [
            r.kind.label,
            _s(r.kind.model_latency_s),
            ", ".join(f"{status} {count}" for status, count in sorted(r.statuses.items())),
            _s(pick(r.agent_s, 0.5)),
            _s(r.startup_s),
            _s(r.window_s),
        ]
        for r in reports
    ]
    return table(["kind", "model latency", "rollouts", "agent run p50", "stack start", "window"], rows)


def render_latency(reports: Sequence[KindReport]) -> str:
    """Completion latency of the event path and of ART's polling, their ratio and calls per rollout."""
    rows = []
    for r in reports:
        event_p50, event_p99 = pick(r.event_s, 0.5), pick(r.event_s, 0.99)
        poll_p50, poll_p99 = pick(r.polling_s, 0.5), pick(r.polling_s, 0.99)
        completion = f"{r.per_rollout(r.completion_calls()):.2f} SQS+S3"
        rows += [
            [r.kind.label, "event path: future resolved", _s(event_p50), _s(event_p99), completion],
            ["", "ART polling: HEAD sees it", _s(poll_p50), _s(poll_p99), f"{statistics.fmean(r.heads):.2f} HEAD"],
            ["", "ratio event / polling", _ratio(event_p50, poll_p50), _ratio(event_p99, poll_p99), ""],
        ]
    return table(["kind", "result written -> detected", "p50", "p99", "calls/rollout"], rows)


def render_calls(reports: Sequence[KindReport]) -> str:
    """AWS calls per rollout by service, operation and caller; totals; ACR's data plane; the baseline's HEADs."""
    systems = [r.system_calls() for r in reports]
    detail = _tally(systems, lambda call: (call.service, call.operation, call.caller))
    rows = []
    for service, counts in _tally(systems, lambda call: call.service).items():
        rows.append(_row([service, "(all)", ""], reports, counts))
        rows += [_row(["", op, caller], reports, n) for (svc, op, caller), n in detail.items() if svc == service]
    rows.append(_row(["total", "", ""], reports, [sum(calls.values()) for calls in systems]))
    by_caller = _tally(systems, lambda call: call.caller)
    rows += [_row(["", "", caller], reports, counts) for caller, counts in by_caller.items()]
    rows += [_row(["acr", name, "(emulator)"], reports, [r.acr[name] for r in reports]) for name in ACR_COUNTERS]
    baseline = [sum(n for call, n in r.calls.items() if call.caller == BASELINE) for r in reports]
    rows.append(_row(["s3", "HeadObject", BASELINE], reports, baseline))
    return table(["service", "operation", "caller", *(r.kind.label for r in reports)], rows)


def figures(reports: Sequence[KindReport]) -> dict[str, Any]:
    """Per kind, the headline numbers for the result file."""
    return {
        r.kind.name: {
            "statuses": dict(sorted(r.statuses.items())),
            "event_path_s": {"p50": round(pick(r.event_s, 0.5), 4), "p99": round(pick(r.event_s, 0.99), 4)},
            "art_polling_s": {"p50": round(pick(r.polling_s, 0.5), 4), "p99": round(pick(r.polling_s, 0.99), 4)},
            "heads_per_rollout": round(statistics.fmean(r.heads), 2) if r.heads else None,
            "system_calls_per_rollout": round(r.per_rollout(sum(r.system_calls().values())), 2),
        }
        for r in reports
    }


def _tally(systems: Sequence[Counter[Call]], key: Callable[[Call], Any]) -> dict[Any, list[int]]:
    """Group each report's calls by ``key``: key -> the count in each report, keys sorted."""
    tallies: list[Counter[Any]] = [Counter() for _ in systems]
    for tally, calls in zip(tallies, systems, strict=True):
        for call, count in calls.items():
            tally[key(call)] += count
    return {name: [tally[name] for tally in tallies] for name in sorted(set().union(*tallies))}


def _row(names: list[str], reports: Sequence[KindReport], counts: Sequence[int]) -> list[str]:
    return [*names, *(f"{count / r.rollouts:.2f}" for r, count in zip(reports, counts, strict=True))]


def render(reports: Sequence[KindReport], settings: BenchSettings) -> str:
    """The whole printed report."""
    joined = "token traces joined first" if settings.traces else "no token traces joined (--no-traces)"
    return "\n".join(
        [
            "",
            f"== local-stack benchmark: {settings.rollouts} rollouts per kind, at most {settings.concurrency} "
            "in flight, a fresh stack per kind ==",
            render_rollouts(reports),
            "",
            "-- completion latency: result written (timings.finished_at, just before the agent's put) -> detected --",
            f"   event path: the trainer's future resolved, {joined}; calls: the trainer's completion-side calls",
            "   ART polling: a HEAD per rollout at t=0, then every 0.75 s x1.5 up to 30 s; ART then also reads it",
            render_latency(reports),
            "",
            "-- AWS calls per rollout over the window (submit to the last rollout finished), whole system --",
            "   the baseline's HEADs are not in the total; S3 -> EventBridge -> SQS delivery makes no API call",
            render_calls(reports),
            "",
        ]
    )


# Command line


def parse_args(argv: Sequence[str] | None = None) -> BenchSettings:
    """Read the command line into :class:`BenchSettings`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=16, help="rollouts per kind")
    parser.add_argument("--concurrency", type=int, default=4, help="rollouts in flight at most (2 cores: keep it low)")
    parser.add_argument("--short-latency", type=float, default=0.0, help="model latency per call of ~1 s rollouts")
    parser.add_argument("--long-latency", type=float, default=4.75, help="model latency per call of ~10 s rollouts")
    parser.add_argument("--kinds", default="1s,10s", help="which kinds to run: 1s, 10s or both (comma-separated)")
    parser.add_argument("--timeout", type=float, default=120.0, help="each rollout's deadline in seconds")
    parser.add_argument("--run-dir", type=Path, default=DEFAULT_RUN_DIR, help="parent of each stack's logs")
    parser.add_argument(
        "--no-traces",
        dest="traces",
        action="store_false",
        help="agents call the model directly and the trainer joins no token traces before resolving futures",
    )
    args = parser.parse_args(argv)
    for name in ("rollouts", "concurrency"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if min(args.short_latency, args.long_latency) < 0:
        parser.error("model latencies must be >= 0 seconds")
    available = {
        "1s": RolloutKind("1s", "~1 s", args.short_latency),
        "10s": RolloutKind("10s", "~10 s", args.long_latency),
    }
    wanted = [name.strip() for name in args.kinds.split(",") if name.strip()]
    unknown = sorted(set(wanted) - set(available))
    if unknown or not wanted:
        parser.error(f"--kinds takes 1s, 10s or 1s,10s; got {args.kinds!r}")
    return BenchSettings(
        kinds=tuple(available[name] for name in wanted),
        rollouts=args.rollouts,
        concurrency=args.concurrency,
        timeout_s=args.timeout,
        run_dir=args.run_dir,
        traces=args.traces,
    )


def main(argv: Sequence[str] | None = None) -> None:
    """Run every kind and print the report."""
    settings = parse_args(argv)
    record = results.begin("local_stack_bench")
    reports = []
    for kind in settings.kinds:
        print(f"{kind.label} rollouts: starting a local stack (logs in {settings.run_dir}/bench-{kind.name}/) ...")
        reports.append(run_kind(kind, settings))
    print(render(reports, settings))
    record.write(figures(reports))


if __name__ == "__main__":
    main()
