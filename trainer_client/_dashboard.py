"""``rollouts dashboard EXP``: the experiment's CloudWatch dashboard, drawn in a local page (D78).

The widgets come from the one definition the CDK dashboard renders (:mod:`rollout_contract.monitoring`); here
each is read from CloudWatch with ``GetMetricData`` (one ``MetricStat`` query per metric) and drawn by
``dashboard.html`` (hand-written SVG, no library), which polls ``/data.json`` every few seconds.

What CloudWatch evaluates and the local renderer does itself, because the local CloudWatch (moto) does not:

- ``SEARCH('{Namespace,dims} MetricName="M" k="v"', 'Stat', period)``: ``ListMetrics`` of ``M`` in the
  namespace, kept when its dimension names are exactly ``dims`` and its values match every ``k="v"``; one
  line per metric found, labelled by the values of the dimensions not matched.
- Metric math: ``+ - * /``, numbers, query ids and ``FILL(id, value)``, per timestamp; a point where an id
  has no value (and no ``FILL``) or that divides by zero is left out, as CloudWatch does.
"""

from __future__ import annotations

import ast
import json
import operator
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.resources import files
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from rollout_contract import monitoring as spec
from rollout_contract.ids import join_exp_id
from rollout_contract.metrics import RUN_DIMENSION, alarm_name_prefix
from rollout_contract.protocol import DEFAULT_MAX_LIFETIME_S
from rollout_contract.resources import ExperimentDescriptor, ExperimentResources

if TYPE_CHECKING:
    from types_boto3_cloudwatch import CloudWatchClient
    from types_boto3_sqs import SQSClient

__all__ = ["DashboardReader", "evaluate", "experiment_started_at", "monitored", "server"]

#: Seconds of history each refresh reads.
WINDOW_S = 3600
#: ``GetMetricData`` takes at most this many queries per call.
_QUERIES_PER_CALL = 500

Points = dict[float, float]


def monitored(descriptor: ExperimentDescriptor) -> spec.Monitored:
    """The names the dashboard watches, for an experiment as its descriptor and resource names give them."""
    resources = ExperimentResources.for_experiment(descriptor.exp_id)
    return spec.Monitored(
        exp_id=descriptor.exp_id,
        dispatch_queue=resources.dispatch_queue.name,
        completion_queue=resources.completion_queue.name,
        dead_letter_queues={label: queue.dlq_name for label, queue in resources.queues.items()},
        functions=dict(descriptor.function_names),
        runtime_dimensions=spec.runtime_dimensions(descriptor.runtime_arn, descriptor.runtime_qualifier),
        max_lifetime_s=DEFAULT_MAX_LIFETIME_S,
        tps_limit=descriptor.tps_limit,
        session_budget=descriptor.session_budget,
    )


@dataclass(frozen=True)
class _Query:
    """One ``MetricStat`` query: a metric at a statistic and period."""

    namespace: str
    name: str
    dimensions: tuple[tuple[str, str], ...]
    statistic: str
    period_s: int


class DashboardReader:
    """Reads every widget's series from CloudWatch, for one experiment (``run``: only that run's lines in
    the per-run widgets). ``started_at`` (unix seconds, :func:`experiment_started_at`) is passed on to the page,
    which draws nothing before it: a point of a period that began before the stack is drawn at its start."""

    def __init__(
        self,
        descriptor: ExperimentDescriptor,
        cloudwatch: CloudWatchClient,
        *,
        run: str | None = None,
        started_at: float | None = None,
    ) -> None:
        self.descriptor = descriptor
        self.run = run
        self.title = join_exp_id(descriptor.exp_id, run)
        self.dashboard = spec.dashboard(monitored(descriptor))
        self.started_at = started_at
        self._cloudwatch = cloudwatch

    def read(self, now: float | None = None) -> dict[str, Any]:
        """The page's data: every widget with its series' points (unix milliseconds, value) and lines."""
        now = time.time() if now is None else now
        graphs = self.dashboard.graphs()
        searched = {found.expression: self._search(found) for graph in graphs for found in _searches(graph)}
        wanted = {query for graph in graphs for query in _queries(graph, searched)}
        points = self._metric_data(list(wanted), now)
        widgets: list[dict[str, Any]] = []
        for row in self.dashboard.rows:
            for widget in row:
                if isinstance(widget, spec.AlarmStatus):
                    widgets.append({"kind": "alarms", "title": widget.title, "width": widget.width, **self._alarms()})
                    continue
                drawn = [
                    {"label": label, "axis": axis, "points": sorted([t * 1000, v] for t, v in found.items())}
                    for axis, side in (("left", widget.left), ("right", widget.right))
                    for series in side
                    for label, found in _series(series, points, searched)
                ]
                widgets.append(
                    {
                        "kind": "graph",
                        "title": widget.title,
                        "width": widget.width,
                        "series": drawn,
                        "lines": [{"value": line.value, "label": line.label} for line in widget.lines],
                        "units": {"left": widget.left_unit, "right": widget.right_unit},
                    }
                )
        started = None if self.started_at is None else self.started_at * 1000
        return {"title": self.title, "at": now * 1000, "started_at": started, "window_s": WINDOW_S, "widgets": widgets}

    def points(self, series: spec.Metric | spec.Math, now: float) -> Points:
        """One metric's or one math expression's points over the last ``WINDOW_S`` (unix seconds -> value)."""
        metrics = [series] if isinstance(series, spec.Metric) else list(series.using.values())
        read = self._metric_data([_stat(metric) for metric in metrics], now)
        [(_, found)] = _series(series, read, {})
        return found

    def _search(self, search: spec.Search) -> list[tuple[str, _Query]]:
        """The metrics a SEARCH finds, each with its line's label."""
        match = dict(search.match)
        if self.run is not None and RUN_DIMENSION in search.schema:
            match[RUN_DIMENSION] = self.run
        found = []
        paginator = self._cloudwatch.get_paginator("list_metrics")
        pages = paginator.paginate(
            Namespace=search.namespace,
            MetricName=search.name,
            Dimensions=[{"Name": key, "Value": value} for key, value in match.items()],
        )
        for page in pages:
            for metric in page["Metrics"]:
                dimensions = {d["Name"]: d["Value"] for d in metric.get("Dimensions", [])}
                if set(dimensions) != set(search.schema) or any(dimensions[k] != v for k, v in match.items()):
                    continue
                label = " ".join(dimensions[key] for key in search.schema if key not in match) or search.name
                query = _Query(search.namespace, search.name, _key(dimensions), search.statistic, search.period_s)
                found.append((label, query))
        return sorted(set(found))

    def _metric_data(self, queries: list[_Query], now: float) -> dict[_Query, Points]:
        end = datetime.fromtimestamp(now, UTC)
        start = datetime.fromtimestamp(now - WINDOW_S, UTC)
        found: dict[_Query, Points] = {query: {} for query in queries}
        for first in range(0, len(queries), _QUERIES_PER_CALL):
            batch = queries[first : first + _QUERIES_PER_CALL]
            request: dict[str, Any] = {
                "MetricDataQueries": [
                    {
                        "Id": f"q{index}",
                        "MetricStat": {
                            "Metric": {
                                "Namespace": query.namespace,
                                "MetricName": query.name,
                                "Dimensions": [{"Name": k, "Value": v} for k, v in query.dimensions],
                            },
                            "Period": query.period_s,
                            "Stat": query.statistic,
                        },
                    }
                    for index, query in enumerate(batch)
                ],
                "StartTime": start,
                "EndTime": end,
            }
            while True:
                page = self._cloudwatch.get_metric_data(**request)
                for result in page["MetricDataResults"]:
                    into = found[batch[int(result["Id"][1:])]]
                    for stamp, value in zip(result.get("Timestamps", []), result.get("Values", []), strict=False):
                        if value is not None:
                            into[stamp.timestamp()] = float(value)
                if not page.get("NextToken"):
                    break
                request["NextToken"] = page["NextToken"]
        return found

    def _alarms(self) -> dict[str, Any]:
        prefix = alarm_name_prefix(self.descriptor.exp_id)
        alarms = [
            {"name": alarm["AlarmName"].removeprefix(prefix), "state": alarm["StateValue"]}
            for page in self._cloudwatch.get_paginator("describe_alarms").paginate(AlarmNamePrefix=prefix)
            for alarm in page["MetricAlarms"]
        ]
        return {"alarms": sorted(alarms, key=lambda alarm: alarm["name"])}


def experiment_started_at(sqs: SQSClient, descriptor: ExperimentDescriptor) -> float | None:
    """When the experiment's stack was created: its dispatch queue's ``CreatedTimestamp`` (unix seconds).

    ``None`` when the queue cannot be read (the page then starts at its first point, as before).
    """
    try:
        attributes = sqs.get_queue_attributes(
            QueueUrl=descriptor.dispatch_queue_url, AttributeNames=["CreatedTimestamp"]
        )["Attributes"]
        return float(attributes["CreatedTimestamp"])
    except (ClientError, BotoCoreError, KeyError, ValueError):
        return None


def _key(dimensions: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The dimensions in the order given: moto 5.2 compares a query's dimensions with a stored metric's after
    sorting both with a comparison that is not an order (``Dimension.__lt__``), so three dimensions in another
    order than the metric was put with may find nothing; a SEARCH's queries keep ``ListMetrics``' order."""
    return tuple(dimensions.items())


def _stat(metric: spec.Metric) -> _Query:
    return _Query(metric.namespace, metric.name, _key(metric.dimensions), metric.statistic, metric.period_s)


def _searches(graph: spec.Graph) -> Iterable[spec.Search]:
    return (series for series in (*graph.left, *graph.right) if isinstance(series, spec.Search))


def _queries(graph: spec.Graph, searched: Mapping[str, list[tuple[str, _Query]]]) -> Iterable[_Query]:
    for series in (*graph.left, *graph.right):
        if isinstance(series, spec.Metric):
            yield _stat(series)
        elif isinstance(series, spec.Math):
            yield from (_stat(metric) for metric in series.using.values())
        else:
            yield from (query for _, query in searched[series.expression])


def _series(
    series: spec.Series, points: Mapping[_Query, Points], searched: Mapping[str, list[tuple[str, _Query]]]
) -> list[tuple[str, Points]]:
    """The lines one series draws, each with its label: one for a metric or math, one per metric a SEARCH found."""
    if isinstance(series, spec.Metric):
        return [(series.label or series.name, points[_stat(series)])]
    if isinstance(series, spec.Math):
        using = {name: points[_stat(metric)] for name, metric in series.using.items()}
        return [(series.label, evaluate(series.expression, using))]
    return [(label, points[query]) for label, query in searched[series.expression]]


_OPERATORS: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def evaluate(expression: str, using: Mapping[str, Points]) -> Points:
    """Metric math ``expression`` over the series in ``using`` (by id), per timestamp (see the module's note)."""
    tree = ast.parse(expression, mode="eval").body

    def at(node: ast.expr, stamp: float) -> float | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return float(node.value)
        if isinstance(node, ast.Name) and node.id in using:
            return using[node.id].get(stamp)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            left, right = at(node.left, stamp), at(node.right, stamp)
            if left is None or right is None or (isinstance(node.op, ast.Div) and right == 0):
                return None
            return _OPERATORS[type(node.op)](left, right)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "FILL":
            series, fill = node.args
            found = at(series, stamp)
            return at(fill, stamp) if found is None else found
        raise ValueError(f"the local dashboard cannot evaluate {ast.unparse(node)!r} in {expression!r}")

    stamps = sorted({stamp for series in using.values() for stamp in series})
    values = {stamp: at(tree, stamp) for stamp in stamps}
    return {stamp: value for stamp, value in values.items() if value is not None}


def server(reader: DashboardReader, port: int) -> ThreadingHTTPServer:
    """An HTTP server on 127.0.0.1:``port`` (0: any free port) of the page and its ``/data.json``."""
    page = files("trainer_client").joinpath("dashboard.html").read_bytes()
    lock = threading.Lock()  # one CloudWatch read at a time, however many tabs poll

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the http.server name)
            path = self.path.split("?")[0]
            if path == "/":
                self._send(200, "text/html; charset=utf-8", page)
            elif path == "/data.json":
                try:
                    with lock:
                        body = json.dumps(reader.read()).encode()
                except Exception as exc:  # shown on the page; the next poll tries again
                    self._send(502, "application/json", json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode())
                    return
                self._send(200, "application/json", body)
            else:
                self._send(404, "text/plain", b"not found")

        def _send(self, status: int, kind: str, body: bytes) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # the browser went away (a tab closed, a reload): nothing to say

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the http.server signature)
            pass

    class Server(ThreadingHTTPServer):
        def handle_error(self, request: Any, client_address: Any) -> None:
            """A client that disconnects is no error worth a traceback; anything else still prints one."""
            if not isinstance(sys.exc_info()[1], ConnectionError):
                super().handle_error(request, client_address)

    return Server(("127.0.0.1", port), Handler)
