"""How long after its result is stored an operator's view still shows a rollout running, before and after D92.

Issue 38's measure: a ``--rollouts`` (400) rollout eval of the example math agent at ``--concurrency`` (32) on the
local stack. While it runs, a sampler reads the views every ``--interval`` (0.5) s, as ``rollouts sessions``,
``top``, ``status`` and ``cancel`` read them: *before* is the sessions table's in-flight index alone (what every
view showed until D92), *after* the same list checked against the stored results
(``trainer_client._sessions.check_in_flight``). A rollout's lag is the last sample that showed it running minus
the time its result was stored (``timings.finished_at``, set by the agent right before its put); zero when no
sample showed it running after that. A sample's time is when the view is ready to print (the index query
answered; for *after*, the check done too), so the check's own time counts in the lag it leaves.

Output: one JSON line and ``benchmarks/results/view_lag_bench.json``: per view, the lag's p50, p99 and max over
every rollout and how many were shown running after their result was stored; the check's own time per sample
(p50, p99) and its calls. Target: ``after.p99 < 2`` s.

Run: ``.venv/bin/python benchmarks/view_lag_bench.py [--rollouts 400] [--concurrency 32] [--interval 0.5]``
(about two minutes on 2 cores). Logs under ``.local-stack/view-lag/``.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import _results as results

import agentcore_rollouts_local  # noqa: F401  (puts local_stack, lambdas, examples on sys.path: D80)
from examples.math_agent.dataset import synthetic
from examples.math_agent.local import MATH_AGENT
from local_stack._process import environment
from local_stack.stack import LocalStack
from rollout_contract.aws import ClientFactory
from trainer_client import BatchItem, PollSettings, RolloutClient
from trainer_client._sessions import check_in_flight, in_flight_sessions
from trainer_client._stored import ResultReader

EXP_ID = "lag"


def quantiles(values: list[float]) -> dict[str, float | int | None]:
    """p50, p99 and max of ``values`` (nearest rank), and how many there are."""
    ordered = sorted(values)

    def rank(q: float) -> float | None:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3) if ordered else None

    return {"p50": rank(0.5), "p99": rank(0.99), "max": rank(1.0), "count": len(ordered)}


class Sampler:
    """Reads the in-flight index (before) and its check against the stored results (after) until stopped."""

    def __init__(self, stack: LocalStack, interval_s: float) -> None:
        self.descriptor = stack.descriptors[EXP_ID]
        factory = ClientFactory(region=self.descriptor.region, endpoints=self.descriptor.endpoints)
        self._dynamodb = factory.client("dynamodb")
        self._s3 = factory.client("s3")
        self._reader = ResultReader(
            self._s3, factory.client("secretsmanager"), self.descriptor.results_bucket, self.descriptor.exp_id
        )
        self._interval = interval_s
        self.last_shown: dict[str, dict[str, float]] = {"before": {}, "after": {}}
        self.check_s: list[float] = []
        self.listed: list[int] = []
        self.stop = threading.Event()

    def run(self) -> None:
        """Sample until :attr:`stop` is set."""
        while not self.stop.is_set():
            at = time.time()
            records = in_flight_sessions(self._dynamodb, self.descriptor.resources, EXP_ID)
            listed_at = time.time()
            view = check_in_flight(self._reader, records, EXP_ID)
            checked_at = time.time()
            self.check_s.append(checked_at - listed_at)
            self.listed.append(len(records))
            for name, shown, ready_at in (("before", records, listed_at), ("after", view.in_flight, checked_at)):
                for record in shown:
                    self.last_shown[name][record.session_id] = ready_at
            self.stop.wait(max(0.0, at + self._interval - time.time()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=400, help="rollouts in the eval (400)")
    parser.add_argument("--concurrency", type=int, default=32, help="rollouts in flight at most (32)")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between samples of the views (0.5)")
    parser.add_argument("--run-dir", default=".local-stack/view-lag", help="logs and state")
    args = parser.parse_args(argv)
    record = results.begin("view_lag_bench")
    stack = LocalStack(MATH_AGENT.settings(run_dir=Path(args.run_dir).resolve(), experiments=(EXP_ID,)))
    stack.start()
    try:
        with environment(stack.env), RolloutClient.for_experiment(EXP_ID, poll=PollSettings()) as client:
            sampler = Sampler(stack, args.interval)  # the stack's endpoints and dummy credentials
            thread = threading.Thread(target=sampler.run, daemon=True)
            started = time.monotonic()
            thread.start()
            rows = synthetic(args.rollouts)
            items: list[BatchItem] = list(client.run_batch(rows, args.concurrency, 300.0))
            eval_s = time.monotonic() - started
        time.sleep(2 * args.interval)  # a last sample or two after the last result
        sampler.stop.set()
        thread.join()
    finally:
        stack.stop()
    stored_at = {
        item.session_id: item.result.timings.finished_at
        for item in items
        if item.result is not None and item.result.timings.finished_at is not None
    }
    figures: dict[str, Any] = {"rollouts": len(items), "stored": len(stored_at), "eval_s": round(eval_s, 1)}
    for name, last_shown in sampler.last_shown.items():
        lags = [max(0.0, last_shown.get(sid, 0.0) - at) for sid, at in stored_at.items()]
        figures[name] = {"lag_s": quantiles(lags), "shown_running_after_stored": sum(lag > 0 for lag in lags)}
    figures["check_s"] = quantiles(sampler.check_s)
    figures["listed_per_sample"] = quantiles([float(n) for n in sampler.listed])
    figures["check_calls"] = "one ListObjectsV2 per input id listed (max 200) + one GetObject per result found"
    print(json.dumps(figures), flush=True)
    p99 = figures["after"]["lag_s"]["p99"]
    met = p99 is not None and p99 < 2 and len(stored_at) == args.rollouts
    record.write(figures, targets={"after.lag_s.p99": "< 2", "met": met})
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
