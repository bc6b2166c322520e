"""The experiment's CloudWatch dashboard and alarms."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import Duration
from aws_cdk import aws_bedrockagentcore as agentcore
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from rollout_contract import metrics as names
from rollout_contract.protocol import SERVICE_QUOTA_EXCEEDED, THROTTLING
from rollout_contract.results import Status

PERIOD = Duration.minutes(1)
WIDTH = 8
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


class RolloutMetrics:
    """The metrics the Lambdas emit for one experiment (namespace and ``exp_id`` dimension), per minute."""

    def __init__(self, exp_id: str) -> None:
        self.exp_id = exp_id

    def metric(
        self, name: str, *, label: str | None = None, statistic: str = "Sum", extra: Mapping[str, str] | None = None
    ) -> cw.Metric:
        """Metric ``name`` of this experiment (``extra`` adds dimensions such as ``status``)."""
        return cw.Metric(
            namespace=names.NAMESPACE,
            metric_name=name,
            dimensions_map={names.EXP_DIMENSION: self.exp_id, **(extra or {})},
            label=label or name,
            statistic=statistic,
            period=PERIOD,
        )

    def throttled(self) -> cw.Metric:
        """Invokes refused with ACR's throttling error."""
        return self.metric(
            names.DISPATCH_ERRORS, label="throttled invokes", extra={names.ERROR_CODE_DIMENSION: THROTTLING.code}
        )

    def out_of_sessions(self) -> cw.Metric:
        """Invokes refused because the account's session quota was used up."""
        return self.metric(
            names.DISPATCH_ERRORS,
            label="session quota exceeded",
            extra={names.ERROR_CODE_DIMENSION: SERVICE_QUOTA_EXCEEDED.code},
        )

    def overdue(self) -> cw.Metric:
        """The sweeper's gauge of rollouts in flight more than ``OVERDUE_GRACE_S`` past their deadline."""
        grace_min = names.OVERDUE_GRACE_S // 60
        return self.metric(names.OVERDUE, label=f"stuck (> {grace_min} min past deadline)", statistic="Maximum")


def dead_letter_depths(dead_letter_queues: Mapping[str, sqs.IQueue]) -> dict[str, cw.Metric]:
    """Messages visible in each dead-letter queue, by name."""
    return {
        name: queue.metric_approximate_number_of_messages_visible(label=name, period=PERIOD, statistic="Maximum")
        for name, queue in dead_letter_queues.items()
    }


class RolloutAlarms(Construct):
    """Any DLQ not empty, any Lambda error, sustained invoke throttling, stuck rollouts.

    Each is named ``agentcore-rollouts-<exp_id>-<construct id>`` (``rollouts top`` lists them by that prefix)
    and, given ``alarm_topic_arn``, notifies that SNS topic when it goes into alarm.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        metrics: RolloutMetrics,
        dead_letter_queues: Mapping[str, sqs.IQueue],
        functions: Mapping[str, lambda_.IFunction],
        alarm_topic_arn: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        exp_id = metrics.exp_id
        self._prefix = names.alarm_name_prefix(exp_id)
        self.alarms: list[cw.Alarm] = []
        for name, depth in dead_letter_depths(dead_letter_queues).items():
            self._at_least_one(depth, f"DeadLetters-{name}", f"{exp_id}: messages in the {name} dead-letter queue")
        for name, function in functions.items():
            self._at_least_one(
                function.metric_errors(period=PERIOD, statistic="Sum"),
                f"Errors-{name}",
                f"{exp_id}: the {name} Lambda failed (see its log group)",
            )
        self._at_least_one(
            cw.MathExpression(
                expression="FILL(throttled, 0) + FILL(out_of_sessions, 0)",
                using_metrics={"throttled": metrics.throttled(), "out_of_sessions": metrics.out_of_sessions()},
                label="throttled or out of sessions",
                period=PERIOD,
            ),
            "SustainedThrottling",
            f"{exp_id}: InvokeAgentRuntime throttled or out of sessions for {THROTTLE_MINUTES} minutes; "
            "lower tps_limit or session_budget, or raise the quotas",
            periods=THROTTLE_MINUTES,
        )
        grace_min = names.OVERDUE_GRACE_S // 60
        self.alarms.append(
            metrics.overdue().create_alarm(
                self,
                "StuckRollouts",
                alarm_name=f"{self._prefix}StuckRollouts",
                alarm_description=f"{exp_id}: rollouts still in flight more than {grace_min} min past their "
                "deadline that the sweeper cannot end (its log names them: 'rollout stuck in flight'), or no "
                "data because the sweeper is not running (see its Errors alarm and its schedule)",
                threshold=0,
                evaluation_periods=STUCK_MINUTES,
                datapoints_to_alarm=STUCK_MINUTES,
                comparison_operator=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
                treat_missing_data=cw.TreatMissingData.BREACHING,
            )
        )
        if alarm_topic_arn is not None:
            action = cw_actions.SnsAction(sns.Topic.from_topic_arn(self, "Topic", alarm_topic_arn))
            for alarm in self.alarms:
                alarm.add_alarm_action(action)

    def _at_least_one(
        self, metric: cw.Metric | cw.MathExpression, construct_id: str, description: str, *, periods: int = 1
    ) -> None:
        """Alarm when ``metric`` is at least 1 for ``periods`` minutes in a row (no data: fine)."""
        self.alarms.append(
            metric.create_alarm(
                self,
                construct_id,
                alarm_name=f"{self._prefix}{construct_id}",
                alarm_description=description,
                threshold=1,
                evaluation_periods=periods,
                comparison_operator=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
            )
        )


class RolloutDashboard(Construct):
    """Throughput (stops included), backlog, runtime, failures by status, Lambdas, rewards, durations, DLQs,
    session-hours and estimated cost, and the alarms' states."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        metrics: RolloutMetrics,
        dashboard_name: str,
        runtime: agentcore.IBedrockAgentRuntime,
        dispatch_queue: sqs.IQueue,
        completion_queue: sqs.IQueue,
        dead_letter_queues: Mapping[str, sqs.IQueue],
        functions: Mapping[str, lambda_.IFunction],
        alarms: list[cw.Alarm],
        max_lifetime_s: int,
        tps_limit: float,
        session_budget: int,
    ) -> None:
        super().__init__(scope, construct_id)
        metric = metrics.metric
        per_minute = tps_limit * 60  # the graph's unit: a 1-minute Sum
        invoke_budget = cw.HorizontalAnnotation(
            value=per_minute, label=f"invoke budget ({tps_limit:g}/s = {per_minute:g}/min, stops included)"
        )
        sessions_line = cw.HorizontalAnnotation(value=session_budget, label=f"session budget ({session_budget})")
        submitted = dispatch_queue.metric_number_of_messages_sent(label="submitted", period=PERIOD, statistic="Sum")
        completed = {
            status: metric(names.COMPLETED, label=status.value, extra={names.STATUS_DIMENSION: status.value})
            for status in Status
        }
        failures = [count for status, count in completed.items() if status is not Status.SUCCEEDED]
        dispatch_lag = dispatch_queue.metric_approximate_age_of_oldest_message(label="oldest dispatch request (s)")
        # A completion event is sent when the result is written (S3 -> EventBridge -> SQS), so its age in the
        # completion queue is the result-written -> trainer latency (no metric measures it end to end).
        trainer_lag = completion_queue.metric_approximate_age_of_oldest_message(
            label="oldest completion not yet read by the trainer (s)", period=PERIOD, statistic="Maximum"
        )
        session_hours, cost = _session_hours_and_cost(metrics)
        self.dashboard = cw.Dashboard(self, "Resource", dashboard_name=dashboard_name)
        self.dashboard.add_widgets(
            _graph(
                "Submitted, dispatched, stopped, succeeded",
                [
                    submitted,
                    metric(names.INVOKED, label="dispatched"),
                    metric(names.STOPS, label="session stops"),
                    completed[Status.SUCCEEDED],
                ],
                annotations=[invoke_budget],
            ),
            _graph(
                "In flight",
                [
                    metric(names.IN_FLIGHT, label="in flight (sessions table)", statistic="Maximum"),
                    runtime.metric_session_count(label="runtime sessions", period=PERIOD),
                ],
                right=[metrics.overdue()],
                annotations=[sessions_line],
            ),
            _graph(
                "Dispatch lag (s)",
                [dispatch_lag, metric(names.QUEUE_DELAY, label="submitted -> dispatched p90", statistic="p90")],
                right=[metric(names.REQUEUED, label="re-queued")],
            ),
        )
        self.dashboard.add_widgets(
            _graph(
                "Invoke throttles and failures",
                [
                    metrics.throttled(),
                    metrics.out_of_sessions(),
                    runtime.metric_throttles(label="runtime throttles", period=PERIOD),
                    metric(names.STOP_FAILURES, label="stop failures"),
                ],
            ),
            _graph(
                "Runtime",
                [
                    runtime.metric_invocations(label="invocations", period=PERIOD),
                    runtime.metric_system_errors(label="system errors", period=PERIOD),
                    runtime.metric_user_errors(label="user errors", period=PERIOD),
                ],
                right=[runtime.metric_latency(label="latency", period=PERIOD)],
            ),
            _graph("Failed rollouts by status", failures),
        )
        self.dashboard.add_widgets(
            _graph(
                "Lambda errors",
                [fn.metric_errors(label=name, period=PERIOD, statistic="Sum") for name, fn in functions.items()],
            ),
            _graph(
                "Lambda duration p90",
                [fn.metric_duration(label=name, period=PERIOD, statistic="p90") for name, fn in functions.items()],
            ),
            _graph("Reward mean", [metric(names.REWARD, label="reward", statistic="Average")]),
        )
        self.dashboard.add_widgets(
            _graph(
                "Rollout duration (s)",
                [
                    *(metric(names.DURATION, label=p, statistic=p) for p in ("p50", "p90", "p99")),
                    metric(names.START_DELAY, label="dispatched -> started p90 (cold start)", statistic="p90"),
                ],
            ),
            _graph(
                "Longest rollout vs session lifetime (s)",
                [metric(names.DURATION, label="longest rollout", statistic="Maximum")],
                annotations=[cw.HorizontalAnnotation(value=max_lifetime_s, label="max session lifetime")],
            ),
            _graph("Dead-letter queue depth", list(dead_letter_depths(dead_letter_queues).values())),
        )
        completed_by_run, reward_by_run = _per_run(metrics)
        self.dashboard.add_widgets(
            _graph("Session-hours and cost", [session_hours], right=[cost]),
            _graph("Result written -> trainer (s)", [trainer_lag]),
            _graph("Completed by run and status", [completed_by_run]),
        )
        self.dashboard.add_widgets(_graph("Reward mean by run", [reward_by_run]))
        self.dashboard.add_widgets(cw.AlarmStatusWidget(title="Alarms", alarms=alarms, width=3 * WIDTH))


class Monitoring(Construct):
    """The experiment's alarms and dashboard.

    Alarms: any DLQ not empty, any Lambda error, sustained invoke throttling, and stuck rollouts: the
    sweeper's ``RolloutsOverdue`` gauge above 0 for ``STUCK_MINUTES`` minutes, i.e. rollouts in flight more
    than ``OVERDUE_GRACE_S`` past their deadline that the sweeper keeps failing to end. The sweeper publishes
    the gauge every minute, 0 included, so missing data means the sweeper is not running, and nothing ends
    overdue rollouts any more: missing data counts as breaching. ``tps_limit`` and ``session_budget`` are drawn
    on the dispatched (per minute: ``tps_limit * 60``) and in-flight graphs. ``alarm_topic_arn`` (an SNS topic)
    becomes every alarm's action; without it the alarms have none. ``max_lifetime_s`` (ACR's session lifetime)
    is drawn on a graph of its own, against the longest rollout, so the duration graph keeps a scale that
    suits minute-long rollouts.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        exp_id: str,
        dashboard_name: str,
        runtime: agentcore.IBedrockAgentRuntime,
        dispatch_queue: sqs.IQueue,
        completion_queue: sqs.IQueue,
        dead_letter_queues: Mapping[str, sqs.IQueue],
        functions: Mapping[str, lambda_.IFunction],
        max_lifetime_s: int,
        tps_limit: float,
        session_budget: int,
        alarm_topic_arn: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.metrics = RolloutMetrics(exp_id)
        self.alarms = RolloutAlarms(
            self,
            "Alarms",
            metrics=self.metrics,
            dead_letter_queues=dead_letter_queues,
            functions=functions,
            alarm_topic_arn=alarm_topic_arn,
        ).alarms
        self.dashboard = RolloutDashboard(
            self,
            "Dashboard",
            metrics=self.metrics,
            dashboard_name=dashboard_name,
            runtime=runtime,
            dispatch_queue=dispatch_queue,
            completion_queue=completion_queue,
            dead_letter_queues=dead_letter_queues,
            functions=functions,
            alarms=self.alarms,
            max_lifetime_s=max_lifetime_s,
            tps_limit=tps_limit,
            session_budget=session_budget,
        ).dashboard


def _session_hours_and_cost(metrics: RolloutMetrics) -> tuple[cw.MathExpression, cw.MathExpression]:
    """Session-hours per minute (left) and the estimated dollars per 1,000 rollouts (right), from durations."""
    using = {
        "seconds": metrics.metric(names.DURATION, statistic="Sum"),
        "rollouts": metrics.metric(names.DURATION, statistic="SampleCount"),
    }
    hours = cw.MathExpression(expression="seconds / 3600", using_metrics=using, label="session-hours", period=PERIOD)
    cost = cw.MathExpression(
        expression=f"1000 * seconds / 3600 * {SESSION_HOUR_USD:.4f} / rollouts",
        using_metrics=using,
        label=f"est. USD per 1,000 rollouts (${SESSION_HOUR_USD:.4f}/session-hour)",
        period=PERIOD,
    )
    return hours, cost


def _per_run(metrics: RolloutMetrics) -> tuple[cw.MathExpression, cw.MathExpression]:
    """One line per run of the experiment (runs are free labels, so found by a search, not listed): completions
    per run and status, and the reward mean per run, from the metrics the finisher emits with the run dimension."""
    per_run = (names.EXP_DIMENSION, names.RUN_DIMENSION)
    return (
        _search(metrics, (*per_run, names.STATUS_DIMENSION), names.COMPLETED, "Sum"),
        _search(metrics, per_run, names.REWARD, "Average"),
    )


def _search(metrics: RolloutMetrics, dimensions: tuple[str, ...], name: str, statistic: str) -> cw.MathExpression:
    """Every time series of metric ``name`` with exactly ``dimensions``, of this experiment only."""
    schema = ",".join((names.NAMESPACE, *dimensions))
    query = f'{{{schema}}} MetricName="{name}" {names.EXP_DIMENSION}="{metrics.exp_id}"'
    expression = f"SEARCH('{query}', '{statistic}', {int(PERIOD.to_seconds())})"
    return cw.MathExpression(expression=expression, using_metrics={}, label="", period=PERIOD)


def _graph(
    title: str,
    left: Sequence[cw.IMetric],
    *,
    right: Sequence[cw.IMetric] | None = None,
    annotations: list[cw.HorizontalAnnotation] | None = None,
) -> cw.GraphWidget:
    return cw.GraphWidget(
        title=title, left=left, right=right or [], left_annotations=annotations or [], width=WIDTH, height=6
    )
