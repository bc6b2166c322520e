"""How long after its result is stored an operator's view still shows a rollout running, before and after D92.

Issue 38's measure: a ``--rollouts`` (400) rollout eval of the example math agent at ``--concurrency`` (32) on the
local stack. While it runs, two samplers read the views every ``--interval`` (0.5) s, side by side: *before* is the
sessions table's in-flight index alone (what every view showed until D92); *after* the same list checked against
the stored results as ``rollouts top`` checks it across refreshes (``trainer_client._sessions.InFlightCheck``: a
result found is kept, D99); *one_shot* checked afresh each time, as a ``rollouts sessions``, ``status`` or
``cancel`` run does (``check_in_flight``). A rollout's lag is the last sample that showed it running minus
the time its result was stored (``timings.finished_at``, set by the agent right before its put); zero when no
sample showed it running after that. A sample's time is when the view is ready to print (the index query
answered; for *after*, the check done too), so the check's own time counts in the lag it leaves.

Output: one JSON line and ``benchmarks/results/view_lag_bench.json``: per view, the lag's p50, p99 and max over
every rollout and how many were shown running after their result was stored; per checked view the check's own
time per sample (p50, p99), the rollouts listed per sample, and the calls; where the table's own lag is (*table*:
how long the finisher's batches waited in its queue and took, from the local workers' logs, and how many finisher
environments ran). Target: p99 < 2 s for both.

Run: ``.venv/bin/python benchmarks/view_lag_bench.py [--rollouts 400] [--concurrency 32] [--interval 0.5]
[--finisher-environments N]``
(about seven minutes on 2 cores). Logs under ``.local-stack/view-lag/``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import _results as results

import agentcore_rollouts_local  # noqa: F401  (puts local_stack, lambdas, examples on sys.path: D80)
from examples.math_agent.dataset import synthetic
from examples.math_agent.local import MATH_AGENT
from local_stack._process import environment
from local_stack.stack import LAMBDA_INITIAL_POLLERS, LocalStack
from rollout_contract.aws import ClientFactory
from rollout_contract.sessions import SessionRecord
from trainer_client import BatchItem, PollSettings, RolloutClient
from trainer_client._sessions import InFlightCheck, InFlightView, check_in_flight, in_flight_sessions
from trainer_client._stored import ResultReader

EXP_ID = "lag"
#: The local worker's line for each batch it handed a function (``local_stack.worker``).
BATCH_LINE = re.compile(r"-finisher: batch of \d+, \d+ failed, (?P<ms>\d+) ms, queued (?P<queued>[\d.]+) s")


def quantiles(values: list[float]) -> dict[str, float | int | None]:
    """p50, p99 and max of ``values`` (nearest rank), and how many there are."""
    ordered = sorted(values)

    def rank(q: float) -> float | None:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3) if ordered else None

    return {"p50": rank(0.5), "p99": rank(0.99), "max": rank(1.0), "count": len(ordered)}


class Sampler:
    """Reads the in-flight index and its check against the stored results until stopped: ``refreshed`` keeps what
    it found across samples (``rollouts top``'s :class:`InFlightCheck`), else each sample checks afresh (a
    ``sessions``, ``status`` or ``cancel`` run). The *before* view (the index alone) is taken by the first."""

    def __init__(self, stack: LocalStack, interval_s: float, *, refreshed: bool) -> None:
        self.descriptor = stack.descriptors[EXP_ID]
        factory = ClientFactory(region=self.descriptor.region, endpoints=self.descriptor.endpoints)
        self._dynamodb = factory.client("dynamodb")
        reader = ResultReader(
            factory.client("s3"), factory.client("secretsmanager"), self.descriptor.results_bucket, EXP_ID
        )

        def check(records: Sequence[SessionRecord]) -> InFlightView:
            return check_in_flight(reader, records, EXP_ID)

        self._check = InFlightCheck(check) if refreshed else check
        self._interval = interval_s
        self.name = "after" if refreshed else "one_shot"
        self.last_shown: dict[str, dict[str, float]] = {"before": {}, self.name: {}}
        self.index_s: list[float] = []
        self.check_s: list[float] = []
        self.listed: list[int] = []
        self.stop = threading.Event()

    def run(self) -> None:
        """Sample until :attr:`stop` is set."""
        while not self.stop.is_set():
            at = time.time()
            records = in_flight_sessions(self._dynamodb, self.descriptor.resources, EXP_ID)
            listed_at = time.time()
            view = self._check(records)
            checked_at = time.time()
            self.index_s.append(listed_at - at)
            self.check_s.append(checked_at - listed_at)
            self.listed.append(len(records))
            for name, shown, ready_at in (("before", records, listed_at), (self.name, view.in_flight, checked_at)):
                for record in shown:
                    self.last_shown[name][record.session_id] = ready_at
            self.stop.wait(max(0.0, at + self._interval - time.time()))


def finisher_batches(run_dir: Path) -> dict[str, Any]:
    """How long the finisher's batches waited in its queue (the oldest record) and took, from the workers' logs."""
    batches = [
        match
        for log in sorted(run_dir.glob(f"worker-{EXP_ID}*.log"))
        for match in map(BATCH_LINE.search, log.read_text(errors="replace").splitlines())
        if match is not None
    ]
    return {
        "queue_wait_s": quantiles([float(m["queued"]) for m in batches]),
        "batch_s": quantiles([int(m["ms"]) / 1000 for m in batches]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=400, help="rollouts in the eval (400)")
    parser.add_argument("--concurrency", type=int, default=32, help="rollouts in flight at most (32)")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between samples of the views (0.5)")
    parser.add_argument(
        "--finisher-environments",
        type=int,
        default=LAMBDA_INITIAL_POLLERS,
        help=f"finisher environments ({LAMBDA_INITIAL_POLLERS}, the local stack's default, D104)",
    )
    parser.add_argument("--run-dir", default=".local-stack/view-lag", help="logs and state")
    args = parser.parse_args(argv)
    record = results.begin("view_lag_bench")
    stack = LocalStack(
        MATH_AGENT.settings(
            run_dir=Path(args.run_dir).resolve(),
            experiments=(EXP_ID,),
            finisher_environments=args.finisher_environments,
        )
    )
    stack.start()
    try:
        with environment(stack.env), RolloutClient.for_experiment(EXP_ID, poll=PollSettings()) as client:
            # `top` and a `sessions` run after another, side by side (the stack's endpoints and dummy credentials)
            samplers = [Sampler(stack, args.interval, refreshed=refreshed) for refreshed in (True, False)]
            threads = [threading.Thread(target=sampler.run, daemon=True) for sampler in samplers]
            started = time.monotonic()
            for thread in threads:
                thread.start()
            rows = synthetic(args.rollouts)
            items: list[BatchItem] = list(client.run_batch(rows, args.concurrency, 300.0))
            eval_s = time.monotonic() - started
        time.sleep(2 * args.interval)  # a last sample or two after the last result
        for sampler, thread in zip(samplers, threads, strict=True):
            sampler.stop.set()
            thread.join()
    finally:
        stack.stop()
    table = {"finisher_environments": stack.settings.finisher_environments, **finisher_batches(stack.run_dir)}
    stored_at = {
        item.session_id: item.result.timings.finished_at
        for item in items
        if item.result is not None and item.result.timings.finished_at is not None
    }
    figures: dict[str, Any] = {"rollouts": len(items), "stored": len(stored_at), "eval_s": round(eval_s, 1)}
    top, one_shot = samplers
    for name, last_shown in (*top.last_shown.items(), (one_shot.name, one_shot.last_shown[one_shot.name])):
        lags = [max(0.0, last_shown.get(sid, 0.0) - at) for sid, at in stored_at.items()]
        figures[name] = {"lag_s": quantiles(lags), "shown_running_after_stored": sum(lag > 0 for lag in lags)}
    figures["before"]["table"] = table
    for sampler in samplers:
        figures[sampler.name]["index_s"] = quantiles(sampler.index_s)
        figures[sampler.name]["check_s"] = quantiles(sampler.check_s)
        figures[sampler.name]["listed_per_sample"] = quantiles([float(n) for n in sampler.listed])
    figures["check_calls"] = {
        "after": "the input ids with a rollout not yet found ended: the pages of the run's prefix from the first,"
        " or one ListObjectsV2 each if fewer + one GetObject per result new since the last sample",
        "one_shot": "every input id listed (max 200), listed as above + one GetObject per result found",
    }
    print(json.dumps(figures), flush=True)
    p99 = [figures[name]["lag_s"]["p99"] for name in ("after", "one_shot")]
    met = all(p is not None and p < 2 for p in p99) and len(stored_at) == args.rollouts
    record.write(figures, targets={"after.lag_s.p99": "< 2", "one_shot.lag_s.p99": "< 2", "met": met})
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
