"""Logging and metrics shared by the three functions: one powertools ``Logger`` and one ``Metrics``.

Logs are JSON with ``exp_id`` and, while a record is processed, ``session_id`` (thread-local keys, so
concurrent records never mix). Metrics go to stdout in CloudWatch embedded metric format; names and
dimensions come from ``rollout_contract.metrics``.
"""

from __future__ import annotations

import threading

from aws_lambda_powertools import Logger, Metrics, single_metric
from aws_lambda_powertools.metrics import MetricUnit

from rollout_contract.metrics import EXP_DIMENSION, NAMESPACE

SERVICE = "agentcore-rollouts"

logger = Logger(service=SERVICE)
metrics = Metrics(namespace=NAMESPACE)
_metrics_lock = threading.Lock()


def bind_experiment(exp_id: str) -> None:
    """Tag every log line and metric of this process with ``exp_id``."""
    logger.append_keys(exp_id=exp_id)
    metrics.set_default_dimensions(**{EXP_DIMENSION: exp_id})


def add_metric(name: str, value: float, unit: MetricUnit = MetricUnit.Count) -> None:
    """Add a data point to this invocation's metrics (safe from worker threads)."""
    with _metrics_lock:
        metrics.add_metric(name=name, unit=unit, value=value)


def emit_with_dimension(name: str, dimension: str, dimension_value: str, value: float = 1) -> None:
    """Emit one count metric with an extra dimension (``status``, ``error_code``) at once."""
    with single_metric(
        name=name,
        unit=MetricUnit.Count,
        value=value,
        namespace=NAMESPACE,
        default_dimensions=dict(metrics.default_dimensions),
    ) as metric:
        metric.add_dimension(name=dimension, value=dimension_value)


def flush_metrics() -> None:
    """Write this invocation's metrics to stdout as one EMF line, if there are any."""
    with _metrics_lock:
        if metrics.metric_set:
            metrics.flush_metrics()
