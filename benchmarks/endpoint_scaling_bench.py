"""Rollouts per second at K = 1, 2, 4 runtime endpoints on the local stack, with the per-endpoint rate scaled down.

Issue 37's scaling check of D96: ``--rollouts`` (120) short rollouts of the scripted agent submitted at once, through
``backlog_bench.run``, against a runtime whose every endpoint takes ``--invoke-tps`` (2) invokes and stops per
second (the emulator's bucket per endpoint, the functions' budget per endpoint), with a session budget
(``--max-sessions``, 120) that does not bind, so the invoke quota is the limit: every rollout spends an invoke and
a stop, so K endpoints bound the drain at ``K x invoke_tps / 2`` rollouts/s. The rate is scaled down so the twin's
CPU is not the limit. Five finisher environments (Lambda's first concurrency for an SQS source).

Output: one JSON line per K (the backlog's summary, ``rollouts_per_s`` = rollouts / drain time, which includes the
stack's first cold start and the last rollouts' tail, and ``steady_dispatch_per_s``, invokes per second between the
10th and the 90th percentile rollout's invoke, ``bound_per_s``), and the result file's ``scaling`` (each K's steady
rate over K x K=1's) and ``scaling_whole_drain``. Target: scaling >= 0.9 at every K.

Run: ``.venv/bin/python benchmarks/endpoint_scaling_bench.py [--endpoints 1,2,4]`` (about four minutes).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import _results as results
import backlog_bench


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoints", default="1,2,4", help="endpoint counts, one run each (1,2,4)")
    parser.add_argument("--rollouts", type=int, default=120, help="rollouts submitted at once per run (120)")
    parser.add_argument("--invoke-tps", type=float, default=2.0, help="invokes and stops per second per endpoint (2)")
    parser.add_argument("--max-sessions", type=int, default=120, help="session budget and ACR's quota (120)")
    parser.add_argument("--run-dir", default=".local-stack/endpoint-scaling", help="logs and state")
    args = parser.parse_args(argv)
    record = results.begin("endpoint_scaling_bench")
    runs: dict[str, dict[str, Any]] = {}
    for k in [int(n) for n in args.endpoints.split(",")]:
        bound = k * args.invoke_tps / 2
        summary: dict[str, Any] = backlog_bench.run(
            argparse.Namespace(
                rollouts=args.rollouts,
                invoke_tps=args.invoke_tps,
                max_sessions=args.max_sessions,
                crash_every=0,
                timeout=60.0,
                sweep_interval=5.0,
                seed=7,
                run_dir=f"{args.run_dir}-{k}",
                max_wait_s=4 * args.rollouts / bound + 300,
                finishers=5,
                endpoints=k,
            )
        )
        summary["rollouts_per_s"] = round(args.rollouts / summary["drain_s"], 3)
        summary["bound_per_s"] = bound
        runs[f"K={k}"] = summary
        print(json.dumps({"endpoints": k, **summary}), flush=True)
    ks = [int(n) for n in args.endpoints.split(",")]

    def scaling_of(figure: str) -> dict[str, float]:
        base = runs[f"K={ks[0]}"][figure]
        return {f"K={k}": round(runs[f"K={k}"][figure] / (k / ks[0] * base), 3) for k in ks}

    scaling = scaling_of("steady_dispatch_per_s")
    ok = all(r["lost"] == 0 and r["unexpected"] == 0 for r in runs.values()) and min(scaling.values()) >= 0.9
    record.write(
        {
            "rollouts": args.rollouts,
            "invoke_tps_per_endpoint": args.invoke_tps,
            "runs": runs,
            "scaling": scaling,
            "scaling_whole_drain": scaling_of("rollouts_per_s"),
        },
        targets={"scaling": ">= 0.9 at every K", "lost": 0, "met": ok},
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
