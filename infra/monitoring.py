"""The experiment's CloudWatch dashboard and alarms: ``rollout_contract.monitoring``'s definition as constructs.

The widgets and alarms are data there (D78); this module renders them: a :class:`~rollout_contract.monitoring.Metric`
becomes a ``cw.Metric``, a ``Math`` or ``Search`` a ``cw.MathExpression``, a ``Graph`` a ``cw.GraphWidget``
(``Line`` -> a horizontal annotation on the left axis; each axis labelled with its unit, ``Graph.left_unit`` and
``right_unit``, as the local page labels it), ``AlarmStatus`` an ``AlarmStatusWidget``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from aws_cdk import Duration
from aws_cdk import aws_bedrockagentcore as agentcore
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from rollout_contract import metrics as names
from rollout_contract import monitoring as spec


class Monitoring(Construct):
    """The experiment's alarms and dashboard, as :mod:`rollout_contract.monitoring` defines them.

    The queues, dead-letter queues (by label), functions (by role) and the runtime are named by their tokens;
    ``alarm_topic_arn`` (an SNS topic) becomes every alarm's action; without it the alarms have none.
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
        watched = spec.Monitored(
            exp_id=exp_id,
            dispatch_queue=dispatch_queue.queue_name,
            completion_queue=completion_queue.queue_name,
            dead_letter_queues={label: queue.queue_name for label, queue in dead_letter_queues.items()},
            functions={role: function.function_name for role, function in functions.items()},
            runtime_dimensions=runtime.metric_invocations().dimensions or {},
            max_lifetime_s=max_lifetime_s,
            tps_limit=tps_limit,
            session_budget=session_budget,
        )
        alarms_scope = Construct(self, "Alarms")
        prefix = names.alarm_name_prefix(exp_id)
        self.alarms = [
            series(alarm.series).create_alarm(
                alarms_scope,
                alarm.name,
                alarm_name=f"{prefix}{alarm.name}",
                alarm_description=alarm.description,
                threshold=alarm.threshold,
                evaluation_periods=alarm.evaluation_periods,
                datapoints_to_alarm=alarm.datapoints_to_alarm,
                comparison_operator=cw.ComparisonOperator[_enum_name(alarm.comparison)],
                treat_missing_data=cw.TreatMissingData[_enum_name(alarm.missing_data)],
            )
            for alarm in spec.alarms(watched)
        ]
        if alarm_topic_arn is not None:
            action = cw_actions.SnsAction(sns.Topic.from_topic_arn(alarms_scope, "Topic", alarm_topic_arn))
            for alarm in self.alarms:
                alarm.add_alarm_action(action)
        self.dashboard = cw.Dashboard(Construct(self, "Dashboard"), "Resource", dashboard_name=dashboard_name)
        for row in spec.dashboard(watched).rows:
            self.dashboard.add_widgets(*(self._widget(widget) for widget in row))

    def _widget(self, widget: spec.Graph | spec.AlarmStatus) -> cw.IWidget:
        if isinstance(widget, spec.AlarmStatus):
            return cw.AlarmStatusWidget(title=widget.title, alarms=self.alarms, width=widget.width)
        return cw.GraphWidget(
            title=widget.title,
            left=[series(s) for s in widget.left],
            right=[series(s) for s in widget.right],
            left_annotations=[cw.HorizontalAnnotation(value=line.value, label=line.label) for line in widget.lines],
            left_y_axis=cw.YAxisProps(label=widget.left_unit, show_units=False),
            right_y_axis=cw.YAxisProps(label=widget.right_unit, show_units=False) if widget.right else None,
            width=widget.width,
            height=widget.height,
        )


def series(drawn: spec.Series) -> cw.Metric | cw.MathExpression:
    """One series of the definition as a CloudWatch metric or math expression."""
    period = Duration.seconds(drawn.period_s)
    if isinstance(drawn, spec.Metric):
        return cw.Metric(
            namespace=drawn.namespace,
            metric_name=drawn.name,
            dimensions_map=dict(drawn.dimensions),
            label=drawn.label,
            statistic=drawn.statistic,
            period=period,
        )
    if isinstance(drawn, spec.Search):
        return cw.MathExpression(expression=drawn.expression, using_metrics={}, label=drawn.label, period=period)
    using = {name: series(metric) for name, metric in drawn.using.items()}
    return cw.MathExpression(expression=drawn.expression, using_metrics=using, label=drawn.label, period=period)


def _enum_name(value: str) -> str:
    """A CDK enum member's name from CloudWatch's value: ``GreaterThanThreshold`` -> ``GREATER_THAN_THRESHOLD``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", value).upper()
