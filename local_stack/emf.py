"""CloudWatch's reading of embedded-metric-format log lines, for the local stack's workers.

In AWS, CloudWatch Logs turns every EMF line a function prints into metric data. Locally the functions print
the same lines to the worker's stdout; :class:`EmfStdout` passes them through to the log unchanged and hands
each one to :class:`EmbeddedMetrics`, which publishes them to the local CloudWatch with ``put_metric_data``
(``rollouts top``, ``rollouts status`` and ``rollouts dashboard`` then read the same metrics as in AWS).
"""

from __future__ import annotations

import json
import logging
import threading
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from types_boto3_cloudwatch import CloudWatchClient
    from types_boto3_cloudwatch.type_defs import DimensionTypeDef, MetricDatumTypeDef

__all__ = ["EmbeddedMetrics", "EmfStdout", "metric_data"]

logger = logging.getLogger(__name__)

_EMF_START = '{"_aws"'
#: ``put_metric_data`` takes at most this many datums per call.
_PUT_BATCH = 1000


def metric_data(document: dict[str, Any]) -> list[tuple[str, MetricDatumTypeDef]]:
    """The ``(namespace, datum)`` pairs one EMF document declares (one datum per value of a metric)."""
    meta = document["_aws"]
    timestamp = datetime.fromtimestamp(meta["Timestamp"] / 1000, UTC)
    data: list[tuple[str, MetricDatumTypeDef]] = []
    for directive in meta["CloudWatchMetrics"]:
        for dimension_set in directive.get("Dimensions") or [[]]:
            dimensions: list[DimensionTypeDef] = [
                {"Name": name, "Value": str(document[name])} for name in dimension_set
            ]
            for metric in directive["Metrics"]:
                values = document[metric["Name"]]
                for value in values if isinstance(values, list) else [values]:
                    datum: MetricDatumTypeDef = {
                        "MetricName": metric["Name"],
                        "Dimensions": dimensions,
                        "Timestamp": timestamp,
                        "Value": float(value),
                        "Unit": metric.get("Unit", "None"),
                    }
                    data.append((directive["Namespace"], datum))
    return data


class EmbeddedMetrics:
    """Collect EMF documents' metric data and publish them on :meth:`flush`."""

    def __init__(self, cloudwatch: CloudWatchClient) -> None:
        self._cloudwatch = cloudwatch
        self._pending: list[tuple[str, MetricDatumTypeDef]] = []
        self._lock = threading.Lock()

    def feed(self, line: str) -> None:
        """Take one printed line; an EMF document's metrics are kept for the next flush, anything else ignored."""
        try:
            data = metric_data(json.loads(line))
        except (ValueError, KeyError, TypeError):
            logger.warning("an EMF line CloudWatch could not read: %.200s", line)
            return
        with self._lock:
            self._pending.extend(data)

    def flush(self) -> None:
        """Publish what was collected since the last flush, per namespace."""
        with self._lock:
            pending, self._pending = self._pending, []
        by_namespace: dict[str, list[MetricDatumTypeDef]] = {}
        for namespace, datum in pending:
            by_namespace.setdefault(namespace, []).append(datum)
        for namespace, data in by_namespace.items():
            for start in range(0, len(data), _PUT_BATCH):
                try:
                    self._cloudwatch.put_metric_data(Namespace=namespace, MetricData=data[start : start + _PUT_BATCH])
                except Exception:
                    logger.exception("could not publish %d metrics of %s to CloudWatch", len(data), namespace)


class EmfStdout:
    """A stdout that writes everything through and feeds the EMF lines to ``metrics`` (``print`` writes each whole)."""

    def __init__(self, stream: TextIO, metrics: EmbeddedMetrics) -> None:
        self._stream = stream
        self._metrics = metrics

    def write(self, text: str) -> int:
        """Write ``text``; an EMF document is also read as metrics."""
        if text.startswith(_EMF_START):
            self._metrics.feed(text)
        return self._stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
