"""ACR's runtime metrics (``AWS/Bedrock-AgentCore``), published by the emulator to the local CloudWatch.

Per runtime and publish interval, as the dashboard's runtime widgets read them (``rollout_contract.monitoring``):
``Invocations`` (invoke requests), ``Throttles`` (refused for the rate), ``SystemErrors`` (5xx),
``UserErrors`` (other 4xx), ``SessionCount`` (sessions started) and ``Latency`` (milliseconds to the answer's
headers), each count published as 0 too once the runtime was invoked, as AWS services publish their counters.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from typing import TYPE_CHECKING

from rollout_contract.monitoring import RUNTIME_NAMESPACE, runtime_dimensions
from rollout_contract.protocol import DEFAULT_QUALIFIER, THROTTLING

if TYPE_CHECKING:
    from types_boto3_cloudwatch import CloudWatchClient
    from types_boto3_cloudwatch.type_defs import DimensionTypeDef, MetricDatumTypeDef

__all__ = ["RuntimeMetrics"]

logger = logging.getLogger(__name__)

_COUNTS = ("Invocations", "Throttles", "SystemErrors", "UserErrors", "SessionCount")


class RuntimeMetrics:
    """Counts of the emulator's invokes per runtime ARN, published on :meth:`flush`."""

    def __init__(self, cloudwatch: CloudWatchClient) -> None:
        self._cloudwatch = cloudwatch
        self._counts: dict[str, Counter[str]] = {}
        self._latencies: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    def invoked(self, arn: str, *, status: int, latency_ms: float, new_session: bool) -> None:
        """Count one invoke of runtime ``arn`` answered with HTTP ``status`` after ``latency_ms``."""
        with self._lock:
            counts = self._counts.setdefault(arn, Counter(dict.fromkeys(_COUNTS, 0)))
            counts["Invocations"] += 1
            counts["SessionCount"] += int(new_session)
            if status == THROTTLING.http_status:
                counts["Throttles"] += 1
            elif status >= 500:
                counts["SystemErrors"] += 1
            elif status >= 400:
                counts["UserErrors"] += 1
            self._latencies.setdefault(arn, []).append(latency_ms)

    def flush(self) -> None:
        """Publish what was counted since the last flush; 0s for every runtime invoked before."""
        with self._lock:
            counts = {arn: Counter(found) for arn, found in self._counts.items()}
            latencies, self._latencies = self._latencies, {}
            for found in self._counts.values():
                for name in found:
                    found[name] = 0
        data: list[MetricDatumTypeDef] = []
        for arn, found in counts.items():
            dimensions: list[DimensionTypeDef] = [
                {"Name": k, "Value": v} for k, v in runtime_dimensions(arn, DEFAULT_QUALIFIER).items()
            ]
            data += [{"MetricName": name, "Dimensions": dimensions, "Value": float(found[name]), "Unit": "Count"}
                     for name in _COUNTS]  # fmt: skip
            if latencies.get(arn):
                data.append({"MetricName": "Latency", "Dimensions": dimensions, "Values": latencies[arn],
                             "Unit": "Milliseconds"})  # fmt: skip
        if not data:
            return
        try:
            self._cloudwatch.put_metric_data(Namespace=RUNTIME_NAMESPACE, MetricData=data)
        except Exception:
            logger.exception("could not publish %d runtime metrics to CloudWatch", len(data))

    def publish_every(self, interval_s: float, stop: threading.Event) -> threading.Thread:
        """Flush every ``interval_s`` in a daemon thread until ``stop`` is set."""

        def loop() -> None:
            while not stop.wait(interval_s):
                self.flush()

        thread = threading.Thread(target=loop, name="runtime-metrics", daemon=True)
        thread.start()
        return thread
