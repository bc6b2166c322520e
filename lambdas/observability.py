"""Logging and metrics shared by the three functions: one powertools ``Logger`` and one ``Metrics``.

Logs are JSON with ``exp_id``, the Lambda request id (``function_request_id``) and, while a record is
processed, ``session_id`` (thread-local keys, so concurrent records never mix). Metrics go to stdout in
CloudWatch embedded metric format when the handler returns or raises; names and dimensions come from
``rollout_contract.metrics``. Handlers are wrapped with :func:`lambda_entry_point`.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from aws_lambda_powertools import Logger, Metrics, single_metric
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from rollout_contract.metrics import EXP_DIMENSION, NAMESPACE
from rollout_contract.naming import PROJECT

SERVICE = PROJECT

logger = Logger(service=SERVICE)
metrics = Metrics(namespace=NAMESPACE)
_metrics_lock = threading.Lock()

Response = TypeVar("Response")
Handler = Callable[[dict[str, Any], LambdaContext], Response]


def lambda_entry_point(handler: Handler[Response]) -> Callable[[dict[str, Any], LambdaContext | None], Response]:
    """Wrap a handler in Powertools' ``inject_lambda_context`` and ``log_metrics``.

    Every log line of the invocation then carries the request id (and cold start, function name, ...),
    and the invocation's metrics are flushed whether the handler returns or raises. A direct call without
    a context (a script, a test) has no request id to log but still flushes its metrics.
    """
    with_metrics: Callable[[dict[str, Any], LambdaContext | None], Response] = metrics.log_metrics(handler)
    with_context: Handler[Response] = logger.inject_lambda_context(with_metrics)

    @functools.wraps(handler)
    def entry_point(event: dict[str, Any], context: LambdaContext | None) -> Response:
        if context is None:
            return with_metrics(event, context)
        return with_context(event, context)

    return entry_point


def bind_experiment(exp_id: str) -> None:
    """Tag every log line and metric of this process with ``exp_id``."""
    logger.append_keys(exp_id=exp_id)
    metrics.set_default_dimensions(**{EXP_DIMENSION: exp_id})


def add_metric(name: str, value: float, unit: MetricUnit = MetricUnit.Count) -> None:
    """Add a data point to this invocation's metrics (safe from worker threads)."""
    with _metrics_lock:
        metrics.add_metric(name=name, unit=unit, value=value)


def emit_with_dimensions(
    name: str, dimensions: Mapping[str, str], value: float = 1, unit: MetricUnit = MetricUnit.Count
) -> None:
    """Emit one metric with extra dimensions (``status``, ``error_code``, ``run``) at once."""
    with single_metric(
        name=name, unit=unit, value=value, namespace=NAMESPACE, default_dimensions=dict(metrics.default_dimensions)
    ) as metric:
        for dimension, dimension_value in dimensions.items():
            metric.add_dimension(name=dimension, value=dimension_value)
