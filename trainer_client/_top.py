"""``rollouts top`` and ``rollouts status``: what a live run is doing, read the way an operator's role may.

One :class:`Snapshot` per refresh, from calls whose cost does not grow with the number of results: the sessions
table's in-flight index (rollouts holding a session slot, by state), the queues' depths (the dispatch queue's
visible messages are the rollouts waiting for capacity), the experiment's CloudWatch metrics (invokes and
completions per second over the last minute; completions by status and the duration percentiles over the
last five), the alarms named after the experiment, and the budgets its descriptor publishes. Nothing lists
the result prefix. What the index lists is checked against the stored results (the table learns of an end
seconds after the result is stored, at a backlog): a rollout whose result is stored is counted ended, not in
flight. The latest failures of the last five minutes are read from what is stored, whoever watched: the
finished items of the sessions table (status and time) and the results found by that check, each reason from
its result. A refresh costs: the index Query (a page per ~1 MB of rollouts in flight), about one ListObjectsV2
per input id with a rollout not yet found ended (at most :data:`~trainer_client._sessions.CHECKED_INPUT_IDS`) and one
GetObject per result found there since the last refresh (``InFlightCheck``), at most
:data:`~trainer_client._sessions.FAILURE_SCAN_PAGES` Scan pages, at most
:data:`_REASONS_KEPT` GetObject for reasons not read before, four GetQueueAttributes, one GetItem, two
GetMetricData and one DescribeAlarms page, and one GET of the token gateway's served versions (the staleness: how
many weight versions behind the trainer's current one the tokens served in the last five minutes were sampled, p50
and max; the gateway counts tokens by version in ten-second buckets, so the read's cost grows with the versions in
its window, not with the calls). The same snapshot serves the local stack (its workers publish the functions'
metrics to the local CloudWatch) and AWS with the trainer role's grants.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

from rollout_contract import ResultKey, Status
from rollout_contract import metrics as names
from rollout_contract.aws import ClientFactory
from rollout_contract.budgets import ATTR_TOTAL, SESSION_BUDGET_ID
from rollout_contract.ids import join_exp_id
from rollout_contract.resources import BUDGET_PARTITION_KEY, ExperimentDescriptor
from rollout_contract.sessions import SessionRecord
from trainer_client._results import ClientResult
from trainer_client._sessions import InFlightCheck, check_in_flight, in_flight_sessions, recent_failures
from trainer_client._stored import ResultReader
from trainer_client._traces import SERVED_VERSIONS_PATH
from trainer_client.staleness import Staleness

__all__ = ["FailureReason", "ServedStaleness", "Snapshot", "Watch", "render"]

#: Seconds the rates (invokes, completions per second) are taken over.
RATE_WINDOW_S = 60
#: Seconds the counts by status and the duration percentiles are taken over.
RECENT_WINDOW_S = 300
#: Latest failure reasons shown (each read once from its result).
_REASONS_KEPT = 5
#: Seconds the gateway's served-versions read may take (a view must not hang on an unreachable gateway).
GATEWAY_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class FailureReason:
    """One ended rollout that did not succeed, and why."""

    session_id: str
    input_id: str
    status: str
    reason: str


@dataclass(frozen=True)
class ServedStaleness:
    """How far behind the trainer's weights the tokens the gateway served lately were sampled.

    Attributes:
        weight_version: the version the trainer last gave the gateway (``None``: none yet).
        p50: the median served token's lag behind ``weight_version``, in weight versions (steps).
        max: the largest lag of a served token.
        tokens: completion tokens served with a known version over the last ``window_s`` seconds.
        unversioned_tokens: those served with no version known.
        window_s: the gateway's window.
        error: why the gateway could not be read (then every other field is empty).
    """

    weight_version: int | None = None
    p50: float | None = None
    max: int | None = None
    tokens: int = 0
    unversioned_tokens: int = 0
    window_s: int = 0
    error: str | None = None

    @classmethod
    def from_gateway(cls, body: dict[str, Any]) -> ServedStaleness:
        """From the gateway's ``GET /admin/served_versions`` answer."""
        current = body.get("weight_version")
        served = {entry["weight_version"]: int(entry["tokens"]) for entry in body.get("served", [])}
        unversioned = served.pop(None, 0)
        staleness = Staleness.of(current, served) if current is not None else None
        return cls(
            weight_version=current,
            p50=staleness.p50 if staleness else None,
            max=staleness.max if staleness else None,
            tokens=sum(served.values()),
            unversioned_tokens=unversioned,
            window_s=int(body.get("window_s", 0)),
        )


@dataclass
class Snapshot:
    """One refresh of ``rollouts top`` (``--json`` prints it as one object; times are unix seconds)."""

    exp_id: str
    at: float
    in_flight: dict[str, int]
    waiting: int
    sessions: int
    session_budget: int
    account_sessions: int | None
    invokes_per_s: float
    tps_limit: float
    completions_per_s: float
    completed: dict[str, int]
    duration_p50_s: float | None
    duration_p99_s: float | None
    queues: dict[str, dict[str, int]]
    dead_letters: dict[str, int]
    alarms: dict[str, str]
    latest_failures: list[FailureReason] = field(default_factory=list)
    #: Rollouts the in-flight index still lists whose result is stored (ended; the slot not yet freed).
    ended_unmarked: int = 0
    #: Whether the failures read covered the whole sessions table (see ``recent_failures``).
    failures_complete: bool = True
    #: The staleness of the tokens the gateway served lately (``None``: the experiment has no gateway).
    staleness: ServedStaleness | None = None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready copy."""
        return asdict(self)


class Watch:
    """Reads snapshots of one experiment, or of one of its runs (sessions and failures; metrics and queues
    are the experiment's)."""

    def __init__(self, descriptor: ExperimentDescriptor, *, run: str | None = None) -> None:
        self.descriptor = descriptor
        self.resources = descriptor.resources
        self.exp_id = join_exp_id(descriptor.exp_id, run)
        factory = ClientFactory(region=descriptor.region, endpoints=descriptor.endpoints, max_pool_connections=4)
        self._clients = factory.clients("sqs", "s3", "dynamodb", "cloudwatch", "secretsmanager")
        self._results = ResultReader(
            self._clients["s3"],
            self._clients["secretsmanager"],
            descriptor.results_bucket,
            descriptor.exp_id,
            descriptor.unproven_results,
        )
        # A result found stored is kept across refreshes: each lists only what is not known to have ended.
        self._check = InFlightCheck(lambda records: check_in_flight(self._results, records, self.exp_id))
        self._reasons: dict[str, FailureReason] = {}
        self._queue_urls: dict[str, str] = {}
        self._queue_specs = (self.resources.dispatch_queue, self.resources.completion_queue)

    def snapshot(self) -> Snapshot:
        """Read one snapshot."""
        now = time.time()
        records = in_flight_sessions(self._clients["dynamodb"], self.resources, self.exp_id)
        view = self._check(records)
        failures, complete = self._latest_failures(now, view.ended)
        states: dict[str, int] = {}
        for record in view.in_flight:
            states[record.state.value] = states.get(record.state.value, 0) + 1
        queues = self._queue_depths()
        values = self._metric_values(now)
        rate = {key: sum(found) / RATE_WINDOW_S for key, found in values.items() if key.startswith("rate ")}
        percentile = {key: round(max(values[key]), 3) if values[key] else None for key in ("p50", "p99")}
        dead_letters = {spec.dlq_name: sum(queues.pop(spec.dlq_name).values()) for spec in self._queue_specs}
        return Snapshot(
            exp_id=self.exp_id,
            at=now,
            in_flight=states,
            waiting=queues[self.resources.dispatch_queue.name]["visible"],
            sessions=len(records),
            session_budget=self.descriptor.session_budget,
            account_sessions=self._account_sessions(),
            invokes_per_s=rate.pop(f"rate {names.INVOKED}"),
            tps_limit=self.descriptor.tps_limit,
            completions_per_s=sum(rate.values()),
            completed={status.value: int(sum(values[status.value])) for status in Status if values[status.value]},
            duration_p50_s=percentile["p50"],
            duration_p99_s=percentile["p99"],
            queues=queues,
            dead_letters=dead_letters,
            alarms=self._alarms(),
            latest_failures=failures,
            ended_unmarked=len(view.ended),
            failures_complete=complete,
            staleness=self._staleness(),
        )

    def _staleness(self) -> ServedStaleness | None:
        """One GET of the gateway's served versions (its cost bounded by the versions in its window)."""
        gateway = self.descriptor.gateway_url
        if not gateway:
            return None
        import httpx  # here: httpx takes 0.1-0.2 s to import, and only this part of the view needs it

        try:
            from trainer_client._gateway_auth import GatewayAuth

            auth = GatewayAuth.admin(self._clients["secretsmanager"], self.descriptor.exp_id)
            response = httpx.get(gateway.rstrip("/") + SERVED_VERSIONS_PATH, timeout=GATEWAY_TIMEOUT_S, auth=auth)
            response.raise_for_status()
            return ServedStaleness.from_gateway(response.json())
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            return ServedStaleness(error=f"{type(exc).__name__}: {exc}")

    def _queue_depths(self) -> dict[str, dict[str, int]]:
        sqs = self._clients["sqs"]
        depths = {}
        for spec in self._queue_specs:
            for name in (spec.name, spec.dlq_name):
                if name not in self._queue_urls:
                    self._queue_urls[name] = sqs.get_queue_url(QueueName=name)["QueueUrl"]
                attributes = sqs.get_queue_attributes(
                    QueueUrl=self._queue_urls[name],
                    AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
                )["Attributes"]
                depths[name] = {
                    "visible": int(attributes["ApproximateNumberOfMessages"]),
                    "in_flight": int(attributes["ApproximateNumberOfMessagesNotVisible"]),
                }
        return depths

    def _account_sessions(self) -> int | None:
        item = (
            self._clients["dynamodb"]
            .get_item(
                TableName=self.descriptor.budget_table,
                Key={BUDGET_PARTITION_KEY: {"S": SESSION_BUDGET_ID}},
                ProjectionExpression="#t",
                ExpressionAttributeNames={"#t": ATTR_TOTAL},
            )
            .get("Item")
        )
        return int(item[ATTR_TOTAL]["N"]) if item and ATTR_TOTAL in item else None

    def _metric_values(self, now: float) -> dict[str, list[float]]:
        """The experiment's metrics: invokes and completions by status over the last minute (``rate ...``),
        completions by status (``succeeded``, ...) and the duration's ``p50``/``p99`` over the last five."""
        experiment = [{"Name": names.EXP_DIMENSION, "Value": self.descriptor.exp_id}]
        by_status = {
            status.value: [*experiment, {"Name": names.STATUS_DIMENSION, "Value": status.value}] for status in Status
        }
        queries = [
            (f"rate {names.INVOKED}", names.INVOKED, experiment, "Sum", RATE_WINDOW_S),
            *((f"rate {status}", names.COMPLETED, dims, "Sum", RATE_WINDOW_S) for status, dims in by_status.items()),
            *((status, names.COMPLETED, dims, "Sum", RECENT_WINDOW_S) for status, dims in by_status.items()),
            *((p, names.DURATION, experiment, p, RECENT_WINDOW_S) for p in ("p50", "p99")),
        ]
        end = datetime.fromtimestamp(now, UTC)
        result: dict[str, list[float]] = {key: [] for key, *_ in queries}
        for window in {query[4] for query in queries}:
            batch = [query for query in queries if query[4] == window]
            request: dict[str, Any] = {
                "MetricDataQueries": [
                    {
                        "Id": f"q{index}",
                        "MetricStat": {
                            "Metric": {"Namespace": names.NAMESPACE, "MetricName": metric, "Dimensions": dimensions},
                            "Period": window,
                            "Stat": stat,
                        },
                    }
                    for index, (_, metric, dimensions, stat, _) in enumerate(batch)
                ],
                "StartTime": end - timedelta(seconds=window),
                "EndTime": end,
            }
            while True:
                page = self._clients["cloudwatch"].get_metric_data(**request)
                for series in page["MetricDataResults"]:
                    found = [value for value in series.get("Values", []) if value is not None]
                    result[batch[int(series["Id"][1:])][0]].extend(found)
                if not page.get("NextToken"):
                    break
                request["NextToken"] = page["NextToken"]
        return result

    def _alarms(self) -> dict[str, str]:
        prefix = names.alarm_name_prefix(self.descriptor.exp_id)
        alarms: dict[str, str] = {}
        for page in self._clients["cloudwatch"].get_paginator("describe_alarms").paginate(AlarmNamePrefix=prefix):
            for alarm in page["MetricAlarms"]:
                alarms[alarm["AlarmName"].removeprefix(prefix)] = alarm["StateValue"]
        return alarms

    def _latest_failures(
        self, now: float, ended: list[tuple[SessionRecord, ClientResult]]
    ) -> tuple[list[FailureReason], bool]:
        """The newest failures of the last :data:`RECENT_WINDOW_S` seconds, from what is stored: the results found
        for rollouts the index still lists, and the finished items of the sessions table (a reason read once)."""
        found = [
            (result.timings.finished_at or now, record, result)
            for record, result in ended
            if result.status is not Status.SUCCEEDED
        ]
        marked, complete = recent_failures(
            self._clients["dynamodb"], self.resources, now - RECENT_WINDOW_S, self.exp_id
        )
        newest: dict[str, tuple[float, SessionRecord, ClientResult | None]] = {
            record.session_id: (at, record, None) for at, record in marked
        }
        newest.update((record.session_id, (at, record, result)) for at, record, result in found)
        latest = sorted(newest.values(), key=lambda entry: -entry[0])[:_REASONS_KEPT]
        reasons = []
        for _, record, given in latest:
            if record.session_id not in self._reasons:
                self._reasons[record.session_id] = self._reason(record, given)
            reasons.append(self._reasons[record.session_id])
        self._reasons = {reason.session_id: reason for reason in reasons}
        return reasons, complete

    def _reason(self, record: SessionRecord, result: ClientResult | None) -> FailureReason:
        """Why ``record``'s rollout failed, from its stored result (read now when not given)."""
        input_id = record.input_id or "-"
        if result is None and record.input_id is not None:
            key = ResultKey(record.exp_id or self.exp_id, record.input_id, record.session_id)
            result = self._results.read_if_stored(str(key))
        if result is None:
            return FailureReason(record.session_id, input_id, record.status or "-", "no result stored")
        reason = result.error.message if result.error else (result.stop_reason or "-")
        return FailureReason(record.session_id, input_id, result.status.value, reason)


def render(snapshot: Snapshot, out: TextIO) -> None:
    """Print a snapshot as lines (the text of ``rollouts status`` and each refresh of ``rollouts top``)."""
    from trainer_client._operate import utc

    def budget(value: float, limit: float, unit: str) -> str:
        shown = f"{value:d}" if isinstance(value, int) else f"{value:.2f}"
        return f"{shown}{unit} of {limit:g}{unit} ({100 * value / limit:.0f}%)"

    s = snapshot
    states = ", ".join(f"{count} {state}" for state, count in sorted(s.in_flight.items())) or "none"
    lines = [
        f"{s.exp_id} at {utc(s.at)}",
        f"rollouts    in flight {sum(s.in_flight.values())} ({states}); waiting for capacity {s.waiting}"
        + (f"; {s.ended_unmarked} ended (result stored), the table not told yet" if s.ended_unmarked else ""),
        f"sessions    {budget(s.sessions, s.session_budget, '')}"
        + ("" if s.account_sessions is None else f"; account-wide {s.account_sessions}"),
        f"invokes     {budget(s.invokes_per_s, s.tps_limit, '/s')} over the last {RATE_WINDOW_S} s",
        f"completions {s.completions_per_s:.2f}/s over the last {RATE_WINDOW_S} s; last {RECENT_WINDOW_S // 60} min: "
        + (", ".join(f"{count} {status}" for status, count in s.completed.items()) or "none"),
        "duration    "
        + (
            "no rollout ended in the last 5 min"
            if s.duration_p50_s is None
            else f"p50 {s.duration_p50_s:.2f} s, p99 {s.duration_p99_s:.2f} s (handler start -> result)"
        ),
    ]
    if s.staleness is not None:
        lines.append("staleness   " + _staleness_words(s.staleness))
    lines.append("dead letters " + ", ".join(f"{name} {depth}" for name, depth in s.dead_letters.items()))
    lines.append(
        "alarms      " + (", ".join(f"{name} {state}" for name, state in sorted(s.alarms.items())) or "none defined")
    )
    if s.latest_failures:
        lines.append(
            f"latest failures (last {RECENT_WINDOW_S // 60} min"
            + ("" if s.failures_complete else "; the sessions table was read in part")
            + "):"
        )
        lines += [f"  {f.status:<16} {f.session_id} ({f.input_id}): {f.reason}" for f in s.latest_failures]
    print("\n".join(lines), file=out)


def _staleness_words(staleness: ServedStaleness) -> str:
    if staleness.error is not None:
        return f"the token gateway could not be read ({staleness.error})"
    window = f"in the last {staleness.window_s // 60} min"
    unversioned = f"; {staleness.unversioned_tokens} with no version" if staleness.unversioned_tokens else ""
    if staleness.weight_version is None:
        return f"no weight version reported to the gateway yet ({staleness.unversioned_tokens} tokens served {window})"
    if staleness.p50 is None:
        return f"weight version {staleness.weight_version}; no tokens served {window}{unversioned}"
    return (
        f"p50 {staleness.p50:g}, max {staleness.max} steps behind weight version {staleness.weight_version} "
        f"({staleness.tokens} tokens served {window}{unversioned})"
    )
