"""At a backlog, how soon a finished rollout's session slot is free, and how long its stop waits for its token.

Issue 37's measure of D90: a batch of ``--factor`` (8) times the session budget (``--max-sessions``, 20) of the
scripted agent's short rollouts, submitted at once against a runtime that takes ``--invoke-tps`` (5) invokes and
stops per second (so the invoke budget is full the whole time and stops compete with invokes for it), on the
local stack, through ``backlog_bench.run`` (no agent crashes), once per finisher concurrency in ``--finishers``
(1: the local default; 5: Lambda's first concurrency for an SQS event source, which the finisher's has no cap
on in AWS). The finisher emits, per rollout, ``SlotFreeDelay``
(the result's ``finished_at`` to the ``finish`` move that freed its slot) and ``StopTokenWait`` (the stop's
token's slot minus when it was asked for); this reads them from the workers' EMF lines in the run's logs.

Output: one JSON line with, per finisher concurrency, the backlog's summary and ``slot_free_s`` /
``stop_token_wait_s`` (p50, p99, max, count). Targets, at Lambda's concurrency: ``slot_free_s.p99 < 2``, nothing
lost. With one finisher, events wait for the previous batch's stops (a batch ends when its last stop is sent).

Run: ``.venv/bin/python benchmarks/slot_free_bench.py [--factor 8] [--max-sessions 20] [--invoke-tps 5]``
(about three minutes with the defaults). Logs under ``.local-stack/slot-free/``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import _results as results
import backlog_bench

from rollout_contract import metrics as names

_EMF_START = '{"_aws"'
#: Concurrent batches Lambda starts an SQS event source with (the finisher's has no cap in AWS).
LAMBDA_FIRST_CONCURRENCY = 5


def emf_values(run_dir: Path, metric: str) -> list[float]:
    """Every value of ``metric`` in the EMF lines of the run's worker logs."""
    values: list[float] = []
    for log in sorted(run_dir.glob("worker-*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith(_EMF_START) and metric in line:
                value = json.loads(line).get(metric)
                values.extend(value if isinstance(value, list) else [value])
    return values


def quantiles(values: list[float]) -> dict[str, float | int | None]:
    """p50, p99 and max of ``values`` (nearest rank), and how many there are."""
    ordered = sorted(values)

    def rank(q: float) -> float | None:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3) if ordered else None

    return {"p50": rank(0.5), "p99": rank(0.99), "max": rank(1.0), "count": len(ordered)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--factor", type=int, default=8, help="rollouts per session slot in the batch (8)")
    parser.add_argument("--max-sessions", type=int, default=20, help="session budget and ACR's quota (20)")
    parser.add_argument("--invoke-tps", type=float, default=5.0, help="invokes and stops per second (5)")
    parser.add_argument("--timeout", type=float, default=20.0, help="rollout timeout, from its start (20 s)")
    parser.add_argument("--finishers", default="1,5", help="finisher environments, one run each (1,5)")
    parser.add_argument("--run-dir", default=".local-stack/slot-free", help="logs and state")
    args = parser.parse_args(argv)
    rollouts = args.factor * args.max_sessions
    record = results.begin("slot_free_bench")
    runs: dict[str, dict[str, Any]] = {}
    for finishers in [int(n) for n in args.finishers.split(",")]:
        run_dir = Path(f"{args.run_dir}-{finishers}").resolve()
        backlog_args = argparse.Namespace(
            rollouts=rollouts,
            invoke_tps=args.invoke_tps,
            max_sessions=args.max_sessions,
            crash_every=0,
            timeout=args.timeout,
            sweep_interval=5.0,
            seed=7,
            run_dir=str(run_dir),
            max_wait_s=4 * (2 * rollouts / args.invoke_tps) + 300,
            finishers=finishers,
        )
        summary: dict[str, Any] = backlog_bench.run(backlog_args)
        summary["slot_free_s"] = quantiles(emf_values(run_dir, names.SLOT_FREE_DELAY))
        summary["stop_token_wait_s"] = quantiles(emf_values(run_dir, names.STOP_TOKEN_WAIT))
        runs[f"finishers={finishers}"] = summary
        print(json.dumps({"finishers": finishers, **summary}), flush=True)
    judged = runs.get(f"finishers={LAMBDA_FIRST_CONCURRENCY}") or next(iter(runs.values()))
    p99 = judged["slot_free_s"]["p99"]
    ok = all(r["lost"] == 0 and r["unexpected"] == 0 for r in runs.values()) and p99 is not None and p99 < 2
    record.write(
        {"rollouts": rollouts, "runs": runs},
        targets={"slot_free_s.p99 (finishers=5)": "< 2", "lost": 0, "met": ok},
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
