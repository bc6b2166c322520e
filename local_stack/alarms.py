"""The experiment's alarms on the local stack: created from the definitions the CDK app renders, and evaluated.

moto stores alarms but never evaluates them, so here the worker that runs the sweeper does what CloudWatch does:
it creates the experiment's alarms (:func:`rollout_contract.monitoring.alarms`, the same definitions as
``infra/monitoring.py``'s) and, every few seconds, reads each alarm's series with the local dashboard's reader
(its metric math included) and sets the alarm's state with ``SetAlarmState``. ``rollouts top`` and
``rollouts dashboard`` then show alarm states as they do in AWS.

How a state is decided, as CloudWatch does for an alarm of N evaluation periods and M datapoints to alarm (M
defaults to N): the last N periods, the current one included, each breaching when its value compares true with
the threshold, or when it has no value and missing data is treated as ``breaching``; ALARM when at least M
breach, else OK. Periods that ended before the alarm was created are not counted (a new alarm has no history),
and an alarm whose periods all lack data and treat that as ``missing`` or ``ignore`` keeps its state.
"""

from __future__ import annotations

import logging
import operator
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from rollout_contract import monitoring as spec
from rollout_contract.metrics import alarm_name_prefix
from rollout_contract.resources import ExperimentDescriptor
from trainer_client._dashboard import DashboardReader, monitored

if TYPE_CHECKING:
    from types_boto3_cloudwatch import CloudWatchClient
    from types_boto3_cloudwatch.literals import ComparisonOperatorType, StateValueType

__all__ = ["LocalAlarms", "state_of"]

logger = logging.getLogger(__name__)

_COMPARISONS: dict[str, Callable[[float, float], bool]] = {
    "GreaterThanOrEqualToThreshold": operator.ge,
    "GreaterThanThreshold": operator.gt,
    "LessThanThreshold": operator.lt,
    "LessThanOrEqualToThreshold": operator.le,
}


def state_of(alarm: spec.Alarm, points: dict[float, float], *, now: float, created_at: float) -> str | None:
    """The state ``alarm`` is in given its series' ``points`` (period start -> value): ALARM, OK, or ``None``
    to keep the current one (see the module's note)."""
    period = alarm.series.period_s
    points = {stamp - stamp % period: value for stamp, value in sorted(points.items())}
    current = now - now % period
    starts = [current - period * back for back in range(alarm.evaluation_periods)]
    counted = [start for start in starts if start + period > created_at]
    if all(start not in points for start in counted) and alarm.missing_data in ("missing", "ignore"):
        return None
    compare = _COMPARISONS[alarm.comparison]
    breaching = sum(
        compare(points[start], alarm.threshold) if start in points else alarm.missing_data == "breaching"
        for start in counted
    )
    return "ALARM" if breaching >= (alarm.datapoints_to_alarm or alarm.evaluation_periods) else "OK"


class LocalAlarms:
    """Creates one experiment's alarms in the local CloudWatch and evaluates them on :meth:`evaluate`."""

    def __init__(self, cloudwatch: CloudWatchClient, descriptor: ExperimentDescriptor) -> None:
        self._cloudwatch = cloudwatch
        self._prefix = alarm_name_prefix(descriptor.exp_id)
        self._alarms = spec.alarms(monitored(descriptor))
        self._reader = DashboardReader(descriptor, cloudwatch)
        self._created_at = time.time()
        self._states: dict[str, str] = {}

    def create(self) -> None:
        """Put every alarm (``PutMetricAlarm``), as the CDK app deploys them."""
        for alarm in self._alarms:
            self._cloudwatch.put_metric_alarm(**self._request(alarm))
        self._created_at = time.time()

    def evaluate(self, now: float | None = None) -> dict[str, str]:
        """Read every alarm's series and set each alarm whose state changed; return the states by alarm name."""
        now = time.time() if now is None else now
        for alarm in self._alarms:
            # Read to the end of the current period: the periods then start on the minute, and moto returns a
            # period only when the window holds all of it (CloudWatch returns the current one as it fills).
            period = alarm.series.period_s
            points = self._reader.points(alarm.series, now - now % period + period)
            state = state_of(alarm, points, now=now, created_at=self._created_at)
            name = self._prefix + alarm.name
            if state is not None and state != self._states.get(name):
                reason = f"the local stack's evaluation of the last {alarm.evaluation_periods} period(s)"
                self._cloudwatch.set_alarm_state(AlarmName=name, StateValue=_state(state), StateReason=reason)
                self._states[name] = state
        return dict(self._states)

    def _request(self, alarm: spec.Alarm) -> dict[str, Any]:
        request: dict[str, Any] = {
            "AlarmName": self._prefix + alarm.name,
            "AlarmDescription": alarm.description,
            "Threshold": alarm.threshold,
            "ComparisonOperator": _comparison(alarm.comparison),
            "EvaluationPeriods": alarm.evaluation_periods,
            "DatapointsToAlarm": alarm.datapoints_to_alarm or alarm.evaluation_periods,
            "TreatMissingData": alarm.missing_data,
        }
        series = alarm.series
        if isinstance(series, spec.Metric):
            return {**request, **_metric_stat(series)}
        queries: list[dict[str, Any]] = [
            {"Id": name, "MetricStat": _query_stat(metric), "ReturnData": False}
            for name, metric in series.using.items()
        ]
        queries.append({"Id": "alarm", "Expression": series.expression, "Label": series.label, "ReturnData": True})
        return {**request, "Metrics": queries}


def _dimensions(metric: spec.Metric) -> list[dict[str, str]]:
    return [{"Name": key, "Value": value} for key, value in metric.dimensions.items()]


def _metric_stat(metric: spec.Metric) -> dict[str, Any]:
    return {
        "Namespace": metric.namespace,
        "MetricName": metric.name,
        "Dimensions": _dimensions(metric),
        "Statistic": metric.statistic,
        "Period": metric.period_s,
    }


def _query_stat(metric: spec.Metric) -> dict[str, Any]:
    return {
        "Metric": {"Namespace": metric.namespace, "MetricName": metric.name, "Dimensions": _dimensions(metric)},
        "Period": metric.period_s,
        "Stat": metric.statistic,
    }


def _comparison(name: str) -> ComparisonOperatorType:
    return cast("ComparisonOperatorType", name)  # the definitions use CloudWatch's names (_COMPARISONS's keys)


def _state(name: str) -> StateValueType:
    return cast("StateValueType", name)  # ALARM or OK, from state_of
