"""How long after its result is stored an operator's view still shows a rollout running, before and after D92.

Issue 38's measure: a ``--rollouts`` (400) rollout eval of the example math agent at ``--concurrency`` (32) on the
local stack. While it runs, two samplers read the views every ``--interval`` (0.5) s, side by side: *before* is the
sessions table's in-flight index alone (what every view showed until D92); *after* the same list checked against the
stored results as ``rollouts top`` checks it across refreshes (``trainer_client._sessions.InFlightCheck``: a result
found is kept, D99); *one_shot* checked afresh each time, as a ``rollouts sessions``, ``status`` or ``cancel`` run
does (``check_in_flight``). A rollout's lag is the last sample that showed it running minus the time its result was
stored (its result event's SQS ``SentTimestamp``: moto's S3 sends the event from the put, right after it stored the
object); zero when no sample showed it running after that. ``from_finished_at`` counts from the agent's
``timings.finished_at`` instead, stamped before its put (so the put's own time counts too). A sample's time is when
the view is ready to print (the index query answered; for *after*, the check done too), so the check's own time
counts in the lag it leaves.

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
import multiprocessing
import re
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event as EventType
from pathlib import Path
from typing import Any

import _results as results

import agentcore_rollouts_local  # noqa: F401  (puts local_stack, lambdas, examples on sys.path: D80)
from examples.math_agent.dataset import synthetic
from examples.math_agent.local import MATH_AGENT
from local_stack._process import environment
from local_stack.stack import LAMBDA_INITIAL_POLLERS, LocalStack
from rollout_contract.aws import ClientFactory
from rollout_contract.resources import ExperimentDescriptor
from rollout_contract.sessions import SessionRecord
from trainer_client import PollSettings, RolloutClient, RolloutFuture
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


@dataclass
class Samples:
    """What one view showed: per view (``before`` and this one), when each rollout was last shown running; and each
    sample's index query time, check time and rollouts listed."""

    name: str
    last_shown: dict[str, dict[str, float]]
    index_s: list[float] = field(default_factory=list)
    check_s: list[float] = field(default_factory=list)
    listed: list[int] = field(default_factory=list)


class Sampler:
    """Reads the in-flight index and its check against the stored results until stopped: ``refreshed`` keeps what
    it found across samples (``rollouts top``'s :class:`InFlightCheck`), else each sample checks afresh (a
    ``sessions``, ``status`` or ``cancel`` run). The *before* view (the index alone) is taken by the first."""

    def __init__(self, descriptor: ExperimentDescriptor, interval_s: float, *, refreshed: bool) -> None:
        self.descriptor = descriptor
        factory = ClientFactory(region=descriptor.region, endpoints=descriptor.endpoints)
        self._dynamodb = factory.client("dynamodb")
        reader = ResultReader(factory.client("s3"), factory.client("secretsmanager"), descriptor.results_bucket, EXP_ID)

        def check(records: Sequence[SessionRecord]) -> InFlightView:
            return check_in_flight(reader, records, EXP_ID)

        self._check = InFlightCheck(check) if refreshed else check
        self._interval = interval_s
        name = "after" if refreshed else "one_shot"
        self.samples = Samples(name, {"before": {}, name: {}})

    def run(self, stop: EventType) -> None:
        """Sample until ``stop`` is set."""
        samples = self.samples
        while not stop.is_set():
            at = time.time()
            records = in_flight_sessions(self._dynamodb, self.descriptor.resources, EXP_ID)
            listed_at = time.time()
            view = self._check(records)
            checked_at = time.time()
            samples.index_s.append(listed_at - at)
            samples.check_s.append(checked_at - listed_at)
            samples.listed.append(len(records))
            for name, shown, ready_at in (("before", records, listed_at), (samples.name, view.in_flight, checked_at)):
                for record in shown:
                    samples.last_shown[name][record.session_id] = ready_at
            stop.wait(max(0.0, at + self._interval - time.time()))


def sample(descriptor: ExperimentDescriptor, interval_s: float, refreshed: bool, stop: EventType, out: Queue) -> None:
    """A view's own process, as an operator's command is: sample until ``stop`` is set, then put its
    :class:`Samples` on ``out``."""
    sampler = Sampler(descriptor, interval_s, refreshed=refreshed)
    sampler.run(stop)
    out.put(sampler.samples)


def run_eval(client: RolloutClient, rows: Sequence[dict[str, Any]], concurrency: int) -> list[RolloutFuture]:
    """Run ``rows`` with at most ``concurrency`` in flight, as ``run_batch`` does; their futures once all ended
    (futures, not ``run_batch``'s items: a future knows when its result event was sent)."""
    slots = threading.Semaphore(concurrency)
    futures: list[RolloutFuture] = []
    for row in rows:
        slots.acquire()
        (future,) = client.submit([(row, None)], timeout=300.0)
        future.add_done_callback(lambda _: slots.release())
        futures.append(future)
    for future in futures:
        future.exception()  # waits for its end
    return futures


def lags(last_shown: dict[str, float], ended_at: dict[str, float]) -> dict[str, Any]:
    """How long after ``ended_at`` each rollout was last shown running: quantiles, and how many were."""
    values = [max(0.0, last_shown.get(sid, 0.0) - at) for sid, at in ended_at.items()]
    return {"lag_s": quantiles(values), "shown_running_after_stored": sum(lag > 0 for lag in values)}


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
            # `top` and a `sessions` run after another, side by side, each in a process of its own (the stack's
            # endpoints and dummy credentials in their environment)
            spawn = multiprocessing.get_context("spawn")
            stop, out = spawn.Event(), spawn.Queue()
            views = [
                spawn.Process(target=sample, args=(stack.descriptors[EXP_ID], args.interval, refreshed, stop, out))
                for refreshed in (True, False)
            ]
            for view in views:
                view.start()
            time.sleep(5)  # the views' imports done before the eval starts
            started = time.monotonic()
            futures = run_eval(client, synthetic(args.rollouts), args.concurrency)
            eval_s = time.monotonic() - started
        time.sleep(2 * args.interval)  # a last sample or two after the last result
        stop.set()
        seen = sorted((out.get(timeout=60) for _ in views), key=lambda samples: samples.name)
        for view in views:
            view.join()
    finally:
        stack.stop()
    table = {"finisher_environments": stack.settings.finisher_environments, **finisher_batches(stack.run_dir)}
    results_of = [(future, future.result()) for future in futures if future.exception() is None]
    stored_at = {result.session_id: future.event_sent_at for future, result in results_of if future.event_sent_at}
    finished_at = {
        result.session_id: result.timings.finished_at for _, result in results_of if result.timings.finished_at
    }
    figures: dict[str, Any] = {"rollouts": len(futures), "stored": len(stored_at), "eval_s": round(eval_s, 1)}
    top, one_shot = seen  # "after", "one_shot"
    for name, last_shown in (*top.last_shown.items(), (one_shot.name, one_shot.last_shown[one_shot.name])):
        figures[name] = {**lags(last_shown, stored_at), "from_finished_at": lags(last_shown, finished_at)}
    figures["before"]["table"] = table
    for samples in seen:
        figures[samples.name]["index_s"] = quantiles(samples.index_s)
        figures[samples.name]["check_s"] = quantiles(samples.check_s)
        figures[samples.name]["listed_per_sample"] = quantiles([float(n) for n in samples.listed])
    figures["check_calls"] = {
        "after": "the input ids with a rollout not yet found ended: short pages of the run's prefix while they pass"
        " them densely, else one ListObjectsV2 each + one GetObject per result new since the last sample",
        "one_shot": "every input id listed (max 200), listed as above + one GetObject per result found",
    }
    print(json.dumps(figures), flush=True)
    p99 = [figures[name]["lag_s"]["p99"] for name in ("after", "one_shot")]
    met = all(p is not None and p < 2 for p in p99) and len(stored_at) == args.rollouts
    record.write(figures, targets={"after.lag_s.p99": "< 2", "one_shot.lag_s.p99": "< 2", "met": met})
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
