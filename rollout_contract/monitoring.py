"""The experiment's dashboard and alarms, as data: one definition, two renderers (D78).

:func:`dashboard` and :func:`alarms` describe every widget and alarm (metrics with namespace, name,
dimensions, statistic and period; metric math; SEARCH expressions; horizontal budget lines) from the names of
an experiment's resources (:class:`Monitored`). ``infra/monitoring.py`` renders them as CloudWatch constructs
(the names are CDK tokens there); ``rollouts dashboard`` (``trainer_client/_dashboard.py``) queries them from
the local CloudWatch and draws them in a page (the names are the local resources' there).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rollout_contract import metrics as names
from rollout_contract.protocol import SERVICE_QUOTA_EXCEEDED, THROTTLING, runtime_id
from rollout_contract.results import Status

__all__ = [
    "RUNTIME_NAMESPACE",
    "SESSION_HOUR_USD",
    "Alarm",
    "AlarmStatus",
    "Dashboard",
    "Graph",
    "Line",
    "Math",
    "Metric",
    "Monitored",
    "Search",
    "Series",
    "alarms",
    "dashboard",
    "runtime_dimensions",
]

#: Seconds of every graph's and alarm's period.
PERIOD_S = 60
#: The unit of a 1-minute Sum on a graph's axis.
PER_MINUTE = "per minute"
#: Minutes of back-to-back throttled 1-minute periods that count as sustained throttling.
THROTTLE_MINUTES = 10
#: Back-to-back 1-minute periods with a rollout stuck past its deadline (or no sweeper data) that page.
STUCK_MINUTES = 3
#: Dollars per hour of one ACR session, for the dashboard's cost estimate: 2 vCPU x $0.0895 per vCPU-hour +
#: 8 GB x $0.00945 per GB-hour (AWS's AgentCore pricing page, Runtime, us-east-1, 2025-10 GA prices; the
#: session size is ACR's microVM, 2 vCPU / 8 GB). An upper bound: ACR bills CPU only while it is busy, not
#: during I/O waits. Session time is taken as ``RolloutDuration`` (handler start to result), which leaves out
#: cold start and the time until the session is stopped.
SESSION_HOUR_USD = 2 * 0.0895 + 8 * 0.00945
SQS = "AWS/SQS"
LAMBDA = "AWS/Lambda"
#: ACR's namespace of runtime metrics.
RUNTIME_NAMESPACE = "AWS/Bedrock-AgentCore"


@dataclass(frozen=True)
class Metric:
    """One CloudWatch metric at one statistic and period."""

    namespace: str
    name: str
    dimensions: Mapping[str, str]
    label: str | None
    statistic: str = "Sum"
    period_s: int = PERIOD_S


@dataclass(frozen=True)
class Math:
    """Metric math over ``using`` (expression ids -> metrics), e.g. ``seconds / 3600``."""

    expression: str
    using: Mapping[str, Metric]
    label: str
    period_s: int = PERIOD_S


@dataclass(frozen=True)
class Search:
    """Every time series of metric ``name`` in ``namespace`` whose dimension names are exactly ``schema``,
    restricted to the dimension values in ``match``: one line each (runs are free labels, so found, not listed)."""

    namespace: str
    schema: tuple[str, ...]
    name: str
    match: Mapping[str, str]
    statistic: str
    period_s: int = PERIOD_S
    label: str = ""

    @property
    def expression(self) -> str:
        """The CloudWatch ``SEARCH(...)`` expression."""
        schema = ",".join((self.namespace, *self.schema))
        filters = "".join(f' {key}="{value}"' for key, value in self.match.items())
        return f"SEARCH('{{{schema}}} MetricName=\"{self.name}\"{filters}', '{self.statistic}', {self.period_s})"


Series = Metric | Math | Search


@dataclass(frozen=True)
class Line:
    """A horizontal line on a graph's left axis (a budget or a limit), in the axis' unit."""

    value: float
    label: str


@dataclass(frozen=True)
class Graph:
    """A line graph: ``left`` and ``right`` axes, ``lines`` on the left; ``width`` of the dashboard's 24 columns;
    each axis' unit (``per minute``: a 1-minute Sum)."""

    title: str
    left: tuple[Series, ...]
    right: tuple[Series, ...] = ()
    lines: tuple[Line, ...] = ()
    width: int = 8
    height: int = 6
    left_unit: str = PER_MINUTE
    right_unit: str = PER_MINUTE


@dataclass(frozen=True)
class AlarmStatus:
    """The states of the experiment's alarms."""

    title: str
    width: int = 24


@dataclass(frozen=True)
class Dashboard:
    """Rows of widgets, top to bottom."""

    rows: tuple[tuple[Graph | AlarmStatus, ...], ...]

    def graphs(self) -> list[Graph]:
        """Every graph, row by row."""
        return [widget for row in self.rows for widget in row if isinstance(widget, Graph)]


@dataclass(frozen=True)
class Alarm:
    """One alarm: named ``<alarm_name_prefix(exp_id)><name>``; ``comparison`` and ``missing_data`` are
    CloudWatch's values (``GreaterThanThreshold``, ``breaching``, ...)."""

    name: str
    description: str
    series: Metric | Math
    threshold: float
    comparison: str
    evaluation_periods: int
    missing_data: str
    datapoints_to_alarm: int | None = None


@dataclass(frozen=True)
class Monitored:
    """What the dashboard and alarms watch, by name: the experiment, its queues, dead-letter queues and
    functions (label -> name), its runtime's metric dimensions, and the budgets and lifetime drawn as lines."""

    exp_id: str
    dispatch_queue: str
    completion_queue: str
    dead_letter_queues: Mapping[str, str]
    functions: Mapping[str, str]
    runtime_dimensions: Mapping[str, str]
    max_lifetime_s: int
    tps_limit: float
    session_budget: int


def runtime_dimensions(runtime_arn: str, qualifier: str) -> dict[str, str]:
    """The dimensions of ACR's metrics of endpoint ``qualifier`` of runtime ``runtime_arn`` (as the CDK's
    runtime construct names them: ``Name`` is ``<runtime name>::<qualifier>``)."""
    name = runtime_id(runtime_arn).rpartition("-")[0]
    return {"Name": f"{name}::{qualifier}", "Operation": "InvokeAgentRuntime", "Resource": runtime_arn}


def metric(
    exp_id: str, name: str, *, label: str | None = None, statistic: str = "Sum", extra: Mapping[str, str] | None = None
) -> Metric:
    """Metric ``name`` the Lambdas emit for experiment ``exp_id`` (``extra`` adds dimensions such as ``status``)."""
    return Metric(
        names.NAMESPACE, name, {names.EXP_DIMENSION: exp_id, **(extra or {})}, label=label or name, statistic=statistic
    )


def throttled(exp_id: str) -> Metric:
    """Invokes refused with ACR's throttling error."""
    return metric(
        exp_id, names.DISPATCH_ERRORS, label="throttled invokes", extra={names.ERROR_CODE_DIMENSION: THROTTLING.code}
    )


def out_of_sessions(exp_id: str) -> Metric:
    """Invokes refused because the account's session quota was used up."""
    return metric(
        exp_id,
        names.DISPATCH_ERRORS,
        label="session quota exceeded",
        extra={names.ERROR_CODE_DIMENSION: SERVICE_QUOTA_EXCEEDED.code},
    )


def overdue(exp_id: str) -> Metric:
    """The sweeper's gauge of rollouts in flight more than ``OVERDUE_GRACE_S`` past their deadline."""
    grace_min = names.OVERDUE_GRACE_S // 60
    return metric(exp_id, names.OVERDUE, label=f"stuck (> {grace_min} min past deadline)", statistic="Maximum")


def dead_letter_depths(watched: Monitored) -> dict[str, Metric]:
    """Messages visible in each dead-letter queue, by label."""
    return {
        label: _queue(name, "ApproximateNumberOfMessagesVisible", label=label, statistic="Maximum")
        for label, name in watched.dead_letter_queues.items()
    }


def alarms(watched: Monitored) -> list[Alarm]:
    """Any DLQ not empty, any Lambda error, sustained invoke throttling (or out of sessions), stuck rollouts."""
    exp_id = watched.exp_id
    found = [
        _at_least_one(f"DeadLetters-{label}", f"{exp_id}: messages in the {label} dead-letter queue", depth)
        for label, depth in dead_letter_depths(watched).items()
    ]
    found += [
        _at_least_one(
            f"Errors-{label}",
            f"{exp_id}: the {label} Lambda failed (see its log group)",
            _function(name, "Errors", label=None, statistic="Sum"),
        )
        for label, name in watched.functions.items()
    ]
    found.append(
        _at_least_one(
            "SustainedThrottling",
            f"{exp_id}: InvokeAgentRuntime throttled or out of sessions for {THROTTLE_MINUTES} minutes; "
            "lower tps_limit or session_budget, or raise the quotas",
            Math(
                "FILL(throttled, 0) + FILL(out_of_sessions, 0)",
                {"throttled": throttled(exp_id), "out_of_sessions": out_of_sessions(exp_id)},
                label="throttled or out of sessions",
            ),
            periods=THROTTLE_MINUTES,
        )
    )
    grace_min = names.OVERDUE_GRACE_S // 60
    found.append(
        Alarm(
            "StuckRollouts",
            f"{exp_id}: rollouts still in flight more than {grace_min} min past their deadline that the sweeper "
            "cannot end (its log names them: 'rollout stuck in flight'), or no data because the sweeper is not "
            "running (see its Errors alarm and its schedule)",
            overdue(exp_id),
            threshold=0,
            comparison="GreaterThanThreshold",
            evaluation_periods=STUCK_MINUTES,
            datapoints_to_alarm=STUCK_MINUTES,
            missing_data="breaching",
        )
    )
    return found


def dashboard(watched: Monitored) -> Dashboard:
    """Throughput (stops included), backlog, runtime, failures by status, Lambdas, rewards, durations, DLQs,
    session-hours and estimated cost, per-run completions and rewards, and the alarms' states."""
    exp_id = watched.exp_id

    def of(name: str, label: str | None = None, statistic: str = "Sum", **extra: str) -> Metric:
        return metric(exp_id, name, label=label, statistic=statistic, extra=extra)

    def runtime(name: str, label: str) -> Metric:
        return Metric(RUNTIME_NAMESPACE, name, watched.runtime_dimensions, label=label, statistic=_RUNTIME_STAT[name])

    per_minute = watched.tps_limit * 60  # the graph's unit: a 1-minute Sum
    invoke_budget = Line(per_minute, f"invoke budget ({watched.tps_limit:g}/s = {per_minute:g}/min, stops included)")
    sessions_line = Line(watched.session_budget, f"session budget ({watched.session_budget})")
    completed = {
        status: of(names.COMPLETED, status.value, **{names.STATUS_DIMENSION: status.value}) for status in Status
    }
    functions = watched.functions.items()
    seconds = of(names.DURATION)
    using = {"seconds": seconds, "rollouts": of(names.DURATION, statistic="SampleCount")}
    per_run = (names.EXP_DIMENSION, names.RUN_DIMENSION)
    match = {names.EXP_DIMENSION: exp_id}
    return Dashboard(
        (
            (
                Graph(
                    "Submitted, dispatched, stopped, succeeded",
                    (
                        _queue(watched.dispatch_queue, "NumberOfMessagesSent", label="submitted", statistic="Sum"),
                        of(names.INVOKED, "dispatched"),
                        of(names.STOPS, "session stops"),
                        completed[Status.SUCCEEDED],
                    ),
                    lines=(invoke_budget,),
                ),
                Graph(
                    "In flight",
                    (
                        of(names.IN_FLIGHT, "in flight (sessions table)", "Maximum"),
                        runtime("SessionCount", "runtime sessions"),
                    ),
                    right=(overdue(exp_id),),
                    lines=(sessions_line,),
                    left_unit="sessions",
                    right_unit="rollouts",
                ),
                Graph(
                    "Dispatch lag (s)",
                    (
                        # The queue construct's default period (5 minutes), as the dashboard has always drawn it.
                        _queue(
                            watched.dispatch_queue,
                            "ApproximateAgeOfOldestMessage",
                            label="oldest dispatch request (s)",
                            statistic="Maximum",
                            period_s=300,
                        ),
                        of(names.QUEUE_DELAY, "submitted -> dispatched p90", "p90"),
                    ),
                    right=(of(names.REQUEUED, "re-queued"),),
                    left_unit="seconds",
                ),
            ),
            (
                Graph(
                    "Invoke throttles and failures",
                    (
                        throttled(exp_id),
                        out_of_sessions(exp_id),
                        runtime("Throttles", "runtime throttles"),
                        of(names.STOP_FAILURES, "stop failures"),
                    ),
                ),
                Graph(
                    "Runtime",
                    (
                        runtime("Invocations", "invocations"),
                        runtime("SystemErrors", "system errors"),
                        runtime("UserErrors", "user errors"),
                    ),
                    right=(runtime("Latency", "latency"),),
                    right_unit="ms",
                ),
                Graph("Failed rollouts by status", tuple(c for s, c in completed.items() if s is not Status.SUCCEEDED)),
            ),
            (
                Graph(
                    "Lambda errors",
                    tuple(_function(name, "Errors", label=label, statistic="Sum") for label, name in functions),
                ),
                Graph(
                    "Lambda duration p90",
                    tuple(_function(name, "Duration", label=label, statistic="p90") for label, name in functions),
                    left_unit="ms",
                ),
                Graph("Reward mean", (of(names.REWARD, "reward", "Average"),), left_unit="reward"),
            ),
            (
                Graph(
                    "Rollout duration (s)",
                    (
                        *(of(names.DURATION, p, p) for p in ("p50", "p90", "p99")),
                        of(names.START_DELAY, "dispatched -> started p90 (cold start)", "p90"),
                    ),
                    left_unit="seconds",
                ),
                Graph(
                    "Longest rollout vs session lifetime (s)",
                    (of(names.DURATION, "longest rollout", "Maximum"),),
                    lines=(Line(watched.max_lifetime_s, "max session lifetime"),),
                    left_unit="seconds",
                ),
                Graph("Dead-letter queue depth", tuple(dead_letter_depths(watched).values()), left_unit="messages"),
            ),
            (
                Graph(
                    "Session-hours and cost",
                    (Math("seconds / 3600", using, label="session-hours"),),
                    right=(
                        Math(
                            f"1000 * seconds / 3600 * {SESSION_HOUR_USD:.4f} / rollouts",
                            using,
                            label=f"est. USD per 1,000 rollouts (${SESSION_HOUR_USD:.4f}/session-hour)",
                        ),
                    ),
                    left_unit="session-hours",
                    right_unit="USD",
                ),
                Graph(
                    "Result written -> trainer (s)",
                    # A completion event is sent when the result is written (S3 -> EventBridge -> SQS), so its
                    # age in the completion queue is the result-written -> trainer latency.
                    (
                        _queue(
                            watched.completion_queue,
                            "ApproximateAgeOfOldestMessage",
                            label="oldest completion not yet read by the trainer (s)",
                            statistic="Maximum",
                        ),
                    ),
                    left_unit="seconds",
                ),
                Graph(
                    "Completed by run and status",
                    (Search(names.NAMESPACE, (*per_run, names.STATUS_DIMENSION), names.COMPLETED, match, "Sum"),),
                ),
            ),
            (
                Graph(
                    "Reward mean by run",
                    (Search(names.NAMESPACE, per_run, names.REWARD, match, "Average"),),
                    left_unit="reward",
                ),
            ),
            (AlarmStatus("Alarms"),),
        )
    )


#: The statistic each runtime metric is graphed with (the CDK runtime construct's defaults).
_RUNTIME_STAT = {
    "SessionCount": "Sum",
    "Throttles": "Sum",
    "Invocations": "Sum",
    "SystemErrors": "Sum",
    "UserErrors": "Sum",
    "Latency": "Average",
}


def _queue(name: str, metric_name: str, *, label: str, statistic: str, period_s: int = PERIOD_S) -> Metric:
    return Metric(SQS, metric_name, {"QueueName": name}, label=label, statistic=statistic, period_s=period_s)


def _function(name: str, metric_name: str, *, label: str | None, statistic: str) -> Metric:
    return Metric(LAMBDA, metric_name, {"FunctionName": name}, label=label, statistic=statistic)


def _at_least_one(name: str, description: str, series: Metric | Math, *, periods: int = 1) -> Alarm:
    """Alarm when ``series`` is at least 1 for ``periods`` minutes in a row (no data: fine)."""
    return Alarm(
        name,
        description,
        series,
        threshold=1,
        comparison="GreaterThanOrEqualToThreshold",
        evaluation_periods=periods,
        missing_data="notBreaching",
    )
