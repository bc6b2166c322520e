"""``rollouts top`` and ``rollouts status``: what a live run is doing, read the way an operator's role may.

One :class:`Snapshot` per refresh, from calls whose cost does not grow with the number of results: the sessions
table's in-flight index (rollouts holding a session slot, by state), the queues' depths (the dispatch queue's
visible messages are the rollouts waiting for capacity), the experiment's CloudWatch metrics (invokes and
completions per second over the last minute; completions by status and the duration percentiles over the
last five), the alarms named after the experiment, and the budgets its descriptor publishes. Nothing lists
the result prefix. The latest failures' reasons come from the rollouts a :class:`Watch` saw leave the
in-flight index between two refreshes (one GetObject each, a few per refresh), so a one-shot view has none.
The same snapshot serves the local stack (its workers publish the functions' metrics to the local
CloudWatch) and AWS with the trainer role's grants.
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
from trainer_client._sessions import in_flight_sessions
from trainer_client._stored import read_if_stored

__all__ = ["FailureReason", "Snapshot", "Watch", "render"]

#: Seconds the rates (invokes, completions per second) are taken over.
RATE_WINDOW_S = 60
#: Seconds the counts by status and the duration percentiles are taken over.
RECENT_WINDOW_S = 300
#: Results a refresh reads at most to find the reasons of rollouts that just ended.
_READS_PER_REFRESH = 5
#: Latest failure reasons kept.
_REASONS_KEPT = 5


@dataclass(frozen=True)
class FailureReason:
    """One ended rollout that did not succeed, and why."""

    session_id: str
    input_id: str
    status: str
    reason: str


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
        self._clients = factory.clients("sqs", "s3", "dynamodb", "cloudwatch")
        self._in_flight: dict[str, SessionRecord] = {}
        self._ended: list[SessionRecord] = []
        self._failures: list[FailureReason] = []
        self._queue_urls: dict[str, str] = {}
        self._queue_specs = (self.resources.dispatch_queue, self.resources.completion_queue)

    def snapshot(self) -> Snapshot:
        """Read one snapshot; remember which rollouts left the in-flight index since the last one."""
        now = time.time()
        records = in_flight_sessions(self._clients["dynamodb"], self.resources, self.exp_id)
        current = {record.session_id: record for record in records}
        self._ended += [record for sid, record in self._in_flight.items() if sid not in current]
        self._in_flight = current
        self._read_failures()
        states: dict[str, int] = {}
        for record in records:
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
            latest_failures=list(self._failures),
        )

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

    def _read_failures(self) -> None:
        """Read the results of a few rollouts that left the in-flight index; keep the latest failures."""
        reads, self._ended = self._ended[:_READS_PER_REFRESH], self._ended[_READS_PER_REFRESH:]
        for record in reads:
            if record.input_id is None:
                continue
            key = ResultKey(record.exp_id or self.exp_id, record.input_id, record.session_id)
            stored = read_if_stored(self._clients["s3"], self.descriptor.results_bucket, str(key))
            if stored is None:
                continue
            result = ClientResult.from_json_bytes(stored)
            if result.status is not Status.SUCCEEDED:
                reason = result.error.message if result.error else (result.stop_reason or "-")
                self._failures.insert(0, FailureReason(record.session_id, record.input_id, result.status.value, reason))
        del self._failures[_REASONS_KEPT:]


def render(snapshot: Snapshot, out: TextIO) -> None:
    """Print a snapshot as lines (the text of ``rollouts status`` and each refresh of ``rollouts top``)."""
    from trainer_client._operate import utc

    def budget(value: float, limit: float, unit: str) -> str:
        return f"{value:.2f}{unit} of {limit:g}{unit} ({100 * value / limit:.0f}%)"

    s = snapshot
    states = ", ".join(f"{count} {state}" for state, count in sorted(s.in_flight.items())) or "none"
    lines = [
        f"{s.exp_id} at {utc(s.at)}",
        f"rollouts    in flight {s.sessions} ({states}); waiting for capacity {s.waiting}",
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
    lines.append("dead letters " + ", ".join(f"{name} {depth}" for name, depth in s.dead_letters.items()))
    lines.append(
        "alarms      " + (", ".join(f"{name} {state}" for name, state in sorted(s.alarms.items())) or "none defined")
    )
    if s.latest_failures:
        lines.append("latest failures:")
        lines += [f"  {f.status:<16} {f.session_id} ({f.input_id}): {f.reason}" for f in s.latest_failures]
    print("\n".join(lines), file=out)
