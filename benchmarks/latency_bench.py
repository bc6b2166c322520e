"""Latency hop by hop on the local stack: our event-driven path vs a direct-invoke + HEAD-poll client, one run.

One :class:`local_stack.stack.LocalStack` (moto server, ACR emulator, Lambda workers, stand-in model, token
gateway) runs ``benchmarks/agents/latency_agent.py``: two streamed model calls through the gateway, then idle
to the rollout's length. Two clients share it:

- **ours**: :class:`trainer_client.RolloutClient` (dispatch queue -> dispatcher -> ``InvokeAgentRuntime`` ->
  agent -> S3 -> EventBridge -> completion queue -> poller -> GetObject + one settled token-trace read);
- **direct**: ART's behaviour: ``InvokeAgentRuntime`` from the trainer, then HEAD polls of the result key
  (at once, then intervals x1.5 from 0.75 s capped at 30 s), then GetObject, then ``StopRuntimeSession``;
  it joins no traces. Its invokes and stops share one rate limiter, as in ART 0.2.0 (``run_batch``
  cancels each finished future, and ``RolloutFuture.cancel`` waits on the client's ``LocalRateLimiter``).

Phases:

1. idle: 2 s rollouts one at a time, ours and direct alternating. Hops from the result's timings
   (``submitted_at``/``dispatched_at``/``started_at``/``finished_at``, all Unix time on this machine) and the
   future's done-callback: submit -> agent started (and its dispatch overhead over direct), result written
   -> future resolved (traces joined; the trace read timed on its own), end to end.
2. long: longer rollouts, ours and direct side by side: end to end.
3. batch: N rollouts submitted at once per client, both under the same invoke rate (``--tps``) and session
   budget (``--sessions``): wall time, invokes per second achieved (does the dispatcher keep the budget
   full?), and, for ours, every AWS call the whole system made (moto's request recorder, callers told
   apart by user-agent app id, as in ``local_stack_bench.py``, which also leaves out the calls of the AWS
   services the twin plays: Lambda's and ACR's metrics, EMF, alarm evaluation) with a cost table at published
   prices.

The stack runs five dispatcher environments (``--dispatchers``; Lambda starts an SQS event source with five
concurrent batches) and the sweeper every minute, as in AWS, so batch walls and calls per rollout compare
with what AWS would do. The finisher runs in one environment (``--finishers N`` for more: each stop then
takes its invoke token alone, about 0.6 more updates per rollout in the quick run, for no batch wall time
measured beyond the noise).

Run: ``.venv/bin/python benchmarks/latency_bench.py [--quick]`` (``--quick``: under 2 minutes on 2 idle cores;
the full run does batches of 64 and 512). The machine is shared and timing is noisy: read the ratios, which
are measured in the same run. The last line is one JSON object with the headline numbers.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _results as results
from botocore.config import Config
from botocore.exceptions import ClientError
from local_stack_bench import (
    BASELINE_APP_ID,
    LAMBDAS_APP_ID,
    NOT_THE_SYSTEM,
    TRAINER_APP_ID,
    Call,
    MotoRecorder,
    _boto_session,
    _client,
    _emulator_counters,
    _wait_for_finishes,
    _wait_for_stops,
    classify,
    pick,
    poll_like_art,
    table,
)

import agentcore_rollouts_local  # noqa: F401  (puts local_stack, lambdas, examples on sys.path: D80)
from local_stack._process import environment
from local_stack.hosting import DEFAULT_MODEL_NAME
from local_stack.stack import DEFAULT_RUN_DIR, LocalStack, StackSettings
from rollout_contract import DispatchRequest, RolloutResult, Timings, new_session_id
from rollout_contract.credentials import ExperimentSecret, read_secret
from trainer_client import AwsClients, PollSettings, RolloutClient

HERE = Path(__file__).parent
LATENCY_AGENT = HERE / "agents" / "latency_agent.py"
AGENT_PRELOAD = ("agent_app.preload", "httpx", "httpcore")
EXP_ID = "latency"
#: The direct client's results go under another prefix: no result rule matches it, so neither our poller nor
#: the finisher sees them (the direct client stops its sessions itself).
DIRECT_PREFIX = "direct-baseline"
MODEL_ID = DEFAULT_MODEL_NAME
ROLLOUT_TIMEOUT_S = 300.0
#: Published prices (us-east-1, USD) per request or request unit; EventBridge delivery of S3 events to the
#: default bus and SSM standard parameters cost nothing per call.
PRICES = {
    "sqs": 0.40 / 1e6,  # per request (standard queue, 64 KB chunk)
    "dynamodb-write": 0.625 / 1e6,  # per write request unit, on demand (a transaction: 2 per item)
    "dynamodb-read": 0.125 / 1e6,  # per read request unit, on demand (a strongly consistent read: 1)
    "s3-put": 0.005 / 1e3,  # PUT, COPY, POST, LIST
    "s3-get": 0.0004 / 1e3,  # GET, HEAD and the rest
}
_DYNAMODB_READS = frozenset({"GetItem", "Query", "BatchGetItem", "Scan", "TransactGetItems"})


#: The sweeper's schedule in AWS (every minute), so its calls per rollout are what they would be there.
SWEEP_INTERVAL_S = 60.0


@dataclass(frozen=True)
class BenchSettings:
    """What the benchmark runs."""

    idle_pairs: int
    rollout_s: float
    long_rollouts: int
    long_s: float
    batches: tuple[int, ...]
    tps: float
    sessions: int
    run_dir: Path
    dispatchers: int = 5
    finishers: int = 1
    quick: bool = False


#: Upper bounds for the headline figures (the issue's targets); the result file says which were met.
TARGETS = {
    "dispatch_overhead_p50_s": 0.05,
    "completion_p50_s": 0.05,
    "completion_p99_s": 0.25,
    "e2e_ratio_vs_direct": 1.0,
    "system_calls_per_rollout": 10.0,
    "dynamodb_calls_per_rollout": 4.0,
}


#: Messages per ``SendMessageBatch`` (SQS's limit): what one ``submit`` call of ours sends at once.
SQS_BATCH = 10


@dataclass
class Sample:
    """One rollout's milestones (Unix times) as one client saw it."""

    submitted: float
    result: RolloutResult | None = None
    resolved: float | None = None
    trace_read_s: float | None = None
    #: When the result's event reached the completion queue (its ``SentTimestamp``; ours only).
    event: float | None = None

    def hop(self, start: str, end: str) -> float | None:
        """Seconds between two milestones: ``submitted``, ``dispatched``, ``started``, ``finished``, ``event``,
        ``resolved``."""
        a, b = self._at(start), self._at(end)
        return None if a is None or b is None else b - a

    def _at(self, name: str) -> float | None:
        if name == "submitted":
            return self.submitted
        if name in ("resolved", "event"):
            return getattr(self, name)
        timings = self.result.timings if self.result else Timings()
        return getattr(timings, f"{name}_at")


@dataclass
class Report:
    """Everything measured, by phase and client."""

    idle: dict[str, list[Sample]] = field(default_factory=lambda: {"ours": [], "direct": []})
    long: dict[str, list[Sample]] = field(default_factory=lambda: {"ours": [], "direct": []})
    batch: dict[int, dict[str, tuple[float, list[Sample]]]] = field(default_factory=dict)
    calls: Counter[Call] = field(default_factory=Counter)
    write_units: float = 0.0
    read_units: float = 0.0
    recorded_rollouts: int = 0
    statuses: Counter[str] = field(default_factory=Counter)


class Ours:
    """Our client: submit through the dispatch queue, futures resolved from the completion queue."""

    def __init__(self, stack: LocalStack) -> None:
        assert stack.moto_url is not None
        poll = PollSettings()
        clients = AwsClients(
            sqs=_client("sqs", stack.moto_url, TRAINER_APP_ID, poll.fetch_workers + 4),
            s3=_client("s3", stack.moto_url, TRAINER_APP_ID, poll.fetch_workers + 4),
        )
        self.client = RolloutClient.from_descriptor(stack.descriptors[EXP_ID], clients=clients, model_id=MODEL_ID)
        self._trace_s: dict[str, float] = {}
        # Time the trace join apart (a benchmark may look inside: the reader is private to the client).
        reader = self.client._traces
        assert reader is not None, "the local stack runs a gateway; its descriptor names it"
        read = reader.read

        def timed_read(session_id: str) -> Any:
            started = time.perf_counter()
            try:
                return read(session_id)
            finally:
                self._trace_s[session_id] = time.perf_counter() - started

        reader.read = timed_read  # type: ignore[method-assign]

    def submit(self, payloads: Sequence[dict[str, Any]]) -> list[tuple[Sample, Any]]:
        """Submit ``payloads`` at once; each sample's ``resolved`` is set by the future's done-callback.

        Sent one SQS batch (ten) per ``submit`` call, each followed by its callbacks: a whole large batch in
        one call took 16 s to send on a loaded machine, and a future resolved meanwhile got its callback, so
        its ``resolved`` time, only after that (which read as a 12 s completion tail in the 512 batch).
        """
        submitted = time.time()
        pairs = []
        for start in range(0, len(payloads), SQS_BATCH):
            chunk = [(p, f"item-{i}") for i, p in enumerate(payloads[start : start + SQS_BATCH], start)]
            for future in self.client.submit(chunk, timeout=ROLLOUT_TIMEOUT_S):
                sample = Sample(submitted)
                future.add_done_callback(lambda _f, s=sample: setattr(s, "resolved", time.time()))
                pairs.append((sample, future))
        return pairs

    def collect(self, pairs: Sequence[tuple[Sample, Any]]) -> list[Sample]:
        """Wait for every future; fill each sample's result and trace-read time.

        A batch larger than the session budget waits for capacity before its rollouts start (their timeout
        runs from the start), so the wait grows with the batch: 2 s per rollout on top of one timeout.
        """
        wait([future for _, future in pairs], timeout=ROLLOUT_TIMEOUT_S + 60 + 2.0 * len(pairs))
        for sample, future in pairs:
            if future.done() and not future.cancelled() and future.exception() is None:
                sample.result = future.result()
                sample.trace_read_s = self._trace_s.get(future.session_id)
                sample.event = future.event_sent_at
        return [sample for sample, _ in pairs]

    def run(self, payloads: Sequence[dict[str, Any]]) -> list[Sample]:
        """Submit and collect."""
        return self.collect(self.submit(payloads))

    def close(self) -> None:
        """Close the client."""
        self.client.close()


class Direct:
    """ART's behaviour: invoke the runtime from the trainer, HEAD-poll the result key, then read it.

    ``tps`` and ``sessions`` cap it like ART's per-process rate limiter (invokes and stops alike) and the
    account's session quota.
    """

    def __init__(self, stack: LocalStack, *, tps: float, sessions: int) -> None:
        assert stack.moto_url is not None
        self._descriptor = stack.descriptors[EXP_ID]
        self._gateway_url = self._descriptor.gateway_url
        config = Config(
            user_agent_appid=BASELINE_APP_ID, max_pool_connections=sessions + 4, retries={"mode": "standard"}
        )
        self._acr = _boto_session().client(
            "bedrock-agentcore", endpoint_url=stack.env["AWS_ENDPOINT_URL_BEDROCK_AGENTCORE"], config=config
        )
        self._s3 = _client("s3", stack.moto_url, BASELINE_APP_ID, sessions + 4)
        # ART's trainer passes the model-call key itself (api_key): the gateway refuses calls without it (D100).
        self._model_key = read_secret(
            _client("secretsmanager", stack.moto_url, BASELINE_APP_ID, 2), EXP_ID, ExperimentSecret.MODEL_KEY
        )
        self._interval = 1.0 / tps
        self._next_slot = 0.0
        self._slot_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(sessions, thread_name_prefix="direct")
        self._stop = threading.Event()

    def run(self, payloads: Sequence[dict[str, Any]]) -> list[Sample]:
        """Run ``payloads`` (all submitted now) with at most ``sessions`` at once."""
        submitted = time.time()
        futures = [self._pool.submit(self._one, payload, submitted) for payload in payloads]
        return [future.result() for future in futures]

    def _wait_for_slot(self) -> None:
        with self._slot_lock:
            now = time.monotonic()
            slot = max(now, self._next_slot)
            self._next_slot = slot + self._interval
        time.sleep(max(0.0, slot - now))

    def _one(self, payload: dict[str, Any], submitted: float) -> Sample:
        sample = Sample(submitted)
        session_id = new_session_id()
        request = DispatchRequest(
            exp_id=DIRECT_PREFIX,
            input_id="direct",
            session_id=session_id,
            payload=payload,
            rollout={
                "base_url": f"{self._gateway_url}/sessions/{session_id}/v1",
                "model_id": MODEL_ID,
                "api_key": self._model_key,
            },
            timeout_s=ROLLOUT_TIMEOUT_S,
            submitted_at=submitted,
        )
        self._wait_for_slot()
        body = request.invoke_payload(payload, self._descriptor.results_bucket)
        body["_rollout"].update(submitted_at=submitted, dispatched_at=time.time())
        target = {"agentRuntimeArn": self._descriptor.runtime_arn, "qualifier": self._descriptor.runtime_qualifier}
        try:
            response = self._acr.invoke_agent_runtime(
                **target, runtimeSessionId=session_id, payload=json.dumps(body).encode(), contentType="application/json"
            )
            response["response"].read()
        except ClientError as exc:  # ART's client gives such a rollout up; counted as "no result", the run goes on
            print(f"direct: invoke failed for good: {exc}", file=sys.stderr, flush=True)
            return sample
        key = str(request.key)
        poll_like_art(self._s3, self._descriptor.results_bucket, key, self._stop)
        stored = self._s3.get_object(Bucket=self._descriptor.results_bucket, Key=key)["Body"].read()
        sample.resolved = time.time()
        sample.result = RolloutResult.from_json_bytes(stored)
        self._wait_for_slot()
        try:
            self._acr.stop_runtime_session(**target, runtimeSessionId=session_id)
        except ClientError as exc:  # ART's cancel() logs a failed stop and goes on
            print(f"direct: stop failed: {exc}", file=sys.stderr, flush=True)
        return sample

    def close(self) -> None:
        """Stop polling and release the threads."""
        self._stop.set()
        self._pool.shutdown(wait=True)


def payload(duration_s: float) -> dict[str, Any]:
    """One rollout of ``duration_s`` seconds with two streamed model calls."""
    return {"duration_s": duration_s, "calls": 2, "prompt": "What is 2 + 3?"}


def run(settings: BenchSettings) -> Report:
    """Start the stack, run every phase, stop the stack."""
    run_dir = (settings.run_dir / "latency-bench").resolve()
    stack = LocalStack(
        StackSettings(
            run_dir=run_dir,
            experiments=(EXP_ID,),
            agent_command=(sys.executable, str(LATENCY_AGENT)),
            tps_limit=settings.tps,
            session_budget=settings.sessions,
            dispatcher_environments=settings.dispatchers,
            finisher_environments=settings.finishers,
            sweep_interval_s=SWEEP_INTERVAL_S,
            runtime_options={"preload": AGENT_PRELOAD},
        )
    )
    recording = run_dir / "moto-recording.jsonl"
    print(f"starting the local stack (logs in {run_dir}) ...", flush=True)
    with environment({"AWS_SDK_UA_APP_ID": LAMBDAS_APP_ID, "MOTO_RECORDER_FILEPATH": str(recording)}):
        stack.start()
    report = Report()
    ours, direct = Ours(stack), Direct(stack, tps=settings.tps, sessions=settings.sessions)
    try:
        print(f"idle: {settings.idle_pairs} x ({settings.rollout_s:g} s ours, then direct) ...", flush=True)
        ours.run([payload(settings.rollout_s)])  # warm the clients, the fork server and the workers
        for _ in range(settings.idle_pairs):
            report.idle["ours"] += ours.run([payload(settings.rollout_s)])
            report.idle["direct"] += direct.run([payload(settings.rollout_s)])
        if settings.long_rollouts:
            print(f"long: {settings.long_rollouts} x {settings.long_s:g} s each way, side by side ...", flush=True)
            with ThreadPoolExecutor(1) as side:
                direct_long = side.submit(direct.run, [payload(settings.long_s)] * settings.long_rollouts)
                report.long["ours"] = ours.run([payload(settings.long_s)] * settings.long_rollouts)
                report.long["direct"] = direct_long.result()
        for size in settings.batches:
            print(f"batch of {size}: ours (recording AWS calls), then direct ...", flush=True)
            report.batch[size] = {}
            recorder = MotoRecorder(stack.moto_url or "")
            acr_before = _emulator_counters(stack)
            recorder.start()
            started = time.monotonic()
            samples = ours.run([payload(settings.rollout_s)] * size)
            report.batch[size]["ours"] = (time.monotonic() - started, samples)
            _wait_for_stops(stack, acr_before, size)
            _wait_for_finishes(stack, EXP_ID)
            _count_calls(report, recorder.stop(), size)
            started = time.monotonic()
            samples = direct.run([payload(settings.rollout_s)] * size)
            report.batch[size]["direct"] = (time.monotonic() - started, samples)
    finally:
        ours.close()
        direct.close()
        stack.stop()
    for samples in [*report.idle.values(), *report.long.values()]:
        report.statuses.update(s.result.status.value if s.result else "no result" for s in samples)
    for by_client in report.batch.values():
        for _, samples in by_client.values():
            report.statuses.update(s.result.status.value if s.result else "no result" for s in samples)
    return report


def _count_calls(report: Report, records: Sequence[dict[str, Any]], rollouts: int) -> None:
    """Add the recorded calls (not the baseline's, the probe's or the AWS services') and DynamoDB's request units."""
    for record in records:
        call = classify(record)
        if call.caller in NOT_THE_SYSTEM:
            continue
        report.calls[call] += 1
        if call.service != "dynamodb":
            continue
        if call.operation == "TransactWriteItems":
            report.write_units += 2 * len(_json_body(record).get("TransactItems", []))
        elif call.operation in _DYNAMODB_READS:
            report.read_units += 1
        else:
            report.write_units += 1
    report.recorded_rollouts += rollouts


def _json_body(record: dict[str, Any]) -> dict[str, Any]:
    body = record.get("body") or "{}"
    if record.get("body_encoded"):
        body = base64.b64decode(body).decode()
    return json.loads(body)


# Printing


def _values(samples: Sequence[Sample], start: str, end: str) -> list[float]:
    return [v for v in (s.hop(start, end) for s in samples) if v is not None]


def _ms(value: float) -> str:
    return "-" if value != value else f"{value * 1000:.0f} ms"


def _p(samples: Sequence[Sample], start: str, end: str, q: float) -> float:
    return pick(_values(samples, start, end), q)


def render_hops(report: Report) -> str:
    """Idle phase: every hop's p50 / p99 for both clients."""
    hops = [
        ("submit -> dispatched (queue, dispatcher bookkeeping)", "submitted", "dispatched"),
        ("dispatched -> agent started (invoke, session start)", "dispatched", "started"),
        ("submit -> agent started", "submitted", "started"),
        ("agent started -> result written", "started", "finished"),
        ("result written -> future resolved / HEAD+GET", "finished", "resolved"),
        ("end to end (submit -> resolved)", "submitted", "resolved"),
    ]
    rows = []
    for label, start, end in hops:
        ours, direct = report.idle["ours"], report.idle["direct"]
        rows.append(
            [
                label,
                _ms(_p(ours, start, end, 0.5)),
                _ms(_p(ours, start, end, 0.99)),
                _ms(_p(direct, start, end, 0.5)),
                _ms(_p(direct, start, end, 0.99)),
            ]
        )
    trace_reads = [s.trace_read_s for s in report.idle["ours"] if s.trace_read_s is not None]
    rows.append(
        ["  of which the settled token-trace read", _ms(pick(trace_reads, 0.5)), _ms(pick(trace_reads, 0.99)), "", ""]
    )
    return table(["hop (idle, one rollout at a time)", "ours p50", "ours p99", "direct p50", "direct p99"], rows)


def render_batches(report: Report, settings: BenchSettings) -> str:
    """Batch phase: wall time and invoke rate for both clients."""
    rows = []
    for size, by_client in report.batch.items():
        for name, (wall, samples) in by_client.items():
            dispatched = sorted(
                s.result.timings.dispatched_at for s in samples if s.result and s.result.timings.dispatched_at
            )
            rate = (len(dispatched) - 1) / (dispatched[-1] - dispatched[0]) if len(dispatched) > 1 else float("nan")
            rows.append(
                [
                    str(size),
                    name,
                    f"{wall:.1f} s",
                    f"{rate:.1f}/s",
                    f"{rate / settings.tps:.2f}",
                    _ms(_p(samples, "finished", "resolved", 0.5)),
                    _ms(_p(samples, "finished", "resolved", 0.99)),
                ]
            )
        ours, direct = by_client["ours"][0], by_client["direct"][0]
        rows.append([str(size), "ratio ours / direct", f"{ours / direct:.2f}", "", "", "", ""])
    header = ["rollouts", "client", "wall", "invokes", "of budget", "written->resolved p50", "p99"]
    split = []
    for size, by_client in report.batch.items():
        samples = by_client["ours"][1]
        traces = [s.trace_read_s for s in samples if s.trace_read_s is not None]
        quantiles = (0.5, 0.99, 1.0)
        split.append(
            [
                str(size),
                " / ".join(_ms(_p(samples, "finished", "event", q)) for q in quantiles),
                " / ".join(_ms(_p(samples, "event", "resolved", q)) for q in quantiles),
                " / ".join(_ms(pick(traces, q)) for q in quantiles),
            ]
        )
    ours_split = ["rollouts", "ours: written -> event queued p50 / p99 / max", "event -> resolved", "trace read"]
    return table(header, rows) + "\n\n" + table(ours_split, split)


def render_calls(report: Report) -> str:
    """Whole-system AWS calls per rollout (batch phase, ours) and their cost per 1,000 rollouts."""
    n = max(report.recorded_rollouts, 1)
    rows = []
    by_service: Counter[str] = Counter()
    for call, count in sorted(report.calls.items()):
        by_service[call.service] += count
        rows.append([call.service, call.operation, call.caller, f"{count / n:.2f}"])
    rows.append(["total", "", "", f"{sum(report.calls.values()) / n:.2f}"])
    cost = _costs(report)
    cost_rows = [[name, f"{units:.2f}", f"${dollars:.4f}"] for name, units, dollars in cost]
    cost_rows.append(["total", "", f"${sum(d for _, _, d in cost):.4f}"])
    return "\n\n".join(
        [
            table(["service", "operation", "caller", "per rollout"], rows),
            table(["priced item (per rollout)", "units", "USD per 1,000 rollouts"], cost_rows),
        ]
    )


def _costs(report: Report) -> list[tuple[str, float, float]]:
    n = max(report.recorded_rollouts, 1)
    s3_put = sum(c for call, c in report.calls.items() if call.service == "s3" and call.operation.startswith("Put"))
    s3_get = sum(
        c
        for call, c in report.calls.items()
        if call.service == "s3" and not call.operation.startswith(("Put", "Delete"))
    )
    sqs = sum(c for call, c in report.calls.items() if call.service == "sqs")
    items = [
        ("SQS requests", sqs / n, PRICES["sqs"]),
        ("DynamoDB write request units", report.write_units / n, PRICES["dynamodb-write"]),
        ("DynamoDB read request units", report.read_units / n, PRICES["dynamodb-read"]),
        ("S3 PUT requests", s3_put / n, PRICES["s3-put"]),
        ("S3 GET/HEAD requests", s3_get / n, PRICES["s3-get"]),
    ]
    return [(name, units, units * price * 1000) for name, units, price in items]


def headline(report: Report) -> dict[str, Any]:
    """The numbers of the last line."""
    ours_all = [*report.idle["ours"], *report.long["ours"]] + [
        s for by_client in report.batch.values() for s in by_client["ours"][1]
    ]
    completion = _values(ours_all, "finished", "resolved")
    idle_ours, idle_direct = report.idle["ours"], report.idle["direct"]
    n = max(report.recorded_rollouts, 1)

    def ratio(phase: dict[str, list[Sample]]) -> float:
        ours, direct = (
            _p(phase["ours"], "submitted", "resolved", 0.5),
            _p(phase["direct"], "submitted", "resolved", 0.5),
        )
        return round(ours / direct, 3) if direct > 0 else float("nan")

    result: dict[str, Any] = {
        "completion_p50_s": round(pick(completion, 0.5), 4),
        "completion_p99_s": round(pick(completion, 0.99), 4),
        "completion_idle_p50_s": round(_p(idle_ours, "finished", "resolved", 0.5), 4),
        "trace_read_p50_s": round(pick([s.trace_read_s for s in idle_ours if s.trace_read_s is not None], 0.5), 4),
        "dispatch_overhead_p50_s": round(
            _p(idle_ours, "submitted", "started", 0.5) - _p(idle_direct, "submitted", "started", 0.5), 4
        ),
        "e2e_ratio_vs_direct": ratio(report.idle),
        "e2e_ratio_vs_direct_long": ratio(report.long) if report.long["ours"] else None,
        "system_calls_per_rollout": round(sum(report.calls.values()) / n, 2),
        "dynamodb_calls_per_rollout": round(
            sum(c for call, c in report.calls.items() if call.service == "dynamodb") / n, 2
        ),
        "cost_usd_per_1000_rollouts": round(sum(d for _, _, d in _costs(report)), 5),
    }
    for size, by_client in report.batch.items():
        result[f"batch_{size}_wall_s"] = {name: round(wall, 2) for name, (wall, _) in by_client.items()}
    result["statuses"] = dict(report.statuses)
    return result


def render(report: Report, settings: BenchSettings) -> str:
    """The printed report, without the JSON line."""
    long = ""
    if report.long["ours"]:
        rows = [
            [name, _ms(_p(samples, "submitted", "resolved", 0.5)), _ms(_p(samples, "finished", "resolved", 0.5))]
            for name, samples in report.long.items()
        ]
        long = table([f"{settings.long_s:g} s rollouts", "end to end p50", "written -> resolved p50"], rows)
    return "\n".join(
        [
            "",
            f"== latency: ours (dispatch queue, dispatcher, events, gateway) vs direct invoke + HEAD polls; "
            f"{settings.rollout_s:g} s rollouts, invoke budget {settings.tps:g}/s, {settings.sessions} sessions, "
            f"{settings.dispatchers} dispatcher and {settings.finishers} finisher environments ==",
            "   timing on a shared 2-core machine is noisy: compare the two clients, measured in the same run",
            render_hops(report),
            "",
            long,
            "",
            "-- batches: all rollouts submitted at once, the same invoke rate and session budget for both --",
            render_batches(report, settings),
            "",
            "-- whole-system AWS calls per rollout (ours, batch phase, submit to the last rollout finished) --",
            "   S3 -> EventBridge -> SQS delivery makes no API call; ACR calls (1 invoke + 1 stop) and Lambda",
            "   compute are priced by consumption, not per call, and are left out of the cost; so are the calls",
            "   of the AWS services the twin plays (metrics, EMF, alarm evaluation): AWS makes those itself",
            render_calls(report),
            "",
        ]
    )


def parse_args(argv: Sequence[str] | None = None) -> BenchSettings:
    """Read the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller run, under 2 minutes on 2 idle cores")
    parser.add_argument("--idle", type=int, help="idle pairs (default 20, quick 6)")
    parser.add_argument("--batches", help="batch sizes, comma-separated (default 64,512, quick 32)")
    parser.add_argument("--tps", type=float, help="invokes per second for both clients (default 20, quick 10)")
    parser.add_argument("--sessions", type=int, default=32, help="sessions at once for both clients")
    parser.add_argument("--rollout-s", type=float, default=2.0, help="length of the idle and batch rollouts")
    parser.add_argument("--long-s", type=float, help="length of the long rollouts (default 20, quick 8)")
    parser.add_argument("--long", type=int, help="long rollouts per client (default 6, quick 3; 0: skip)")
    parser.add_argument(
        "--dispatchers",
        type=int,
        default=5,
        help="dispatcher environments (default 5: Lambda's first concurrent batches for an SQS event source)",
    )
    parser.add_argument("--finishers", type=int, default=1, help="finisher environments (default 1)")
    parser.add_argument("--run-dir", type=Path, default=DEFAULT_RUN_DIR, help="parent of the stack's logs")
    args = parser.parse_args(argv)
    quick = args.quick
    batches = args.batches or ("32" if quick else "64,512")
    try:
        sizes = tuple(int(size) for size in batches.split(",") if size.strip())
    except ValueError:
        parser.error(f"--batches takes sizes like 64,512; got {batches!r}")
    settings = BenchSettings(
        idle_pairs=args.idle if args.idle is not None else (6 if quick else 20),
        rollout_s=args.rollout_s,
        long_rollouts=args.long if args.long is not None else (3 if quick else 6),
        long_s=args.long_s if args.long_s is not None else (8.0 if quick else 20.0),
        batches=sizes,
        tps=args.tps if args.tps is not None else (10.0 if quick else 20.0),
        sessions=args.sessions,
        run_dir=args.run_dir,
        dispatchers=args.dispatchers,
        finishers=args.finishers,
        quick=quick,
    )
    if min(settings.idle_pairs, settings.sessions, settings.dispatchers, settings.finishers) < 1 or settings.tps <= 0:
        parser.error("--idle, --sessions, --tps, --dispatchers and --finishers must be positive")
    if any(s < 1 for s in sizes):
        parser.error("batch sizes must be positive")
    return settings


def met(figures: dict[str, Any]) -> dict[str, bool]:
    """Each target against its figure (a figure the run has no value for is not met)."""
    return {name: figures.get(name) is not None and figures[name] <= bound for name, bound in TARGETS.items()}


def main(argv: Sequence[str] | None = None) -> None:
    """Run the benchmark, print the report, then the JSON line; write the result file."""
    settings = parse_args(argv)
    record = results.begin("latency_bench-quick" if settings.quick else "latency_bench")
    started = time.monotonic()
    report = run(settings)
    print(render(report, settings))
    print(f"(benchmark took {time.monotonic() - started:.0f} s)")
    figures = headline(report)
    print(json.dumps(figures))
    record.write(figures, targets={"at_most": TARGETS, "met": met(figures)})


if __name__ == "__main__":
    main()
