"""Rollouts per second at K = 1, 2, 4 runtime endpoints on the local stack, and the step model checked against them.

Issue 37's scaling check of D96 and D98: ``--per-endpoint`` (60) short rollouts of the scripted agent per endpoint
submitted at once (a step of 60 x K, so each K's step takes about as long), through ``backlog_bench.run_timed``,
against a runtime whose every endpoint takes ``--invoke-tps`` (1) invokes and stops per second (the emulator's
bucket per endpoint, the functions' budget per endpoint), with a session budget as large as the step, so the invoke
quota is the limit: every rollout spends an invoke and a stop, so K endpoints bound the drain at
``K x invoke_tps / 2`` rollouts/s. The rate is scaled down so the twin's CPU is not the limit. Five finisher
environments (Lambda's first concurrency for an SQS source).

For each K: the steady invoke rate (``steady_dispatch_per_s``, invokes per second between the 10th and the 90th
percentile rollout's invoke) and each endpoint's calls per second in that span (``endpoint_calls``: where a
shortfall goes); the step's time (first submit to the last future resolved) against issue 37's bound
``max(N x 2 / (rate x K), N x d / S) + d`` (``d`` the mean invoke-to-result time) and against the same bound at the
budget's slot spacing (``step_model.budget_interval_s``: the budget keeps 1/1.05 of the rate, D21); and the step
model's prediction (``benchmarks/step_model.py``) from the run's durations and the twin's hops measured at K = 1
(first submit to first invoke, invoke to the agent's start, result to stop and to the trainer's future).
Then the model's projection for the seeds' settings on AWS (ART's client, ours at K = 1 and 10).

Targets: scaling >= 0.9 at every K; the model within 10% of the measured step at every K; the step within 5% of
issue 37's bound (``step_over_bound``).

Run: ``.venv/bin/python benchmarks/endpoint_scaling_bench.py [--endpoints 1,2,4]`` (about nine minutes).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from typing import Any

import _results as results
import backlog_bench
import step_model


def hops_of(timeline: backlog_bench.Timeline) -> step_model.Hops:
    """The twin's hops in one run (medians; the first invoke's wait for the dispatch)."""
    done = [r for r in timeline.results.values() if r.timings.started_at and r.timings.finished_at]
    finished = {r.session_id: r.timings.finished_at for r in done}
    first_invoke = min(r.timings.dispatched_at or float("inf") for r in done)
    stop = statistics.median(timeline.stopped[s] - at for s, at in finished.items() if s in timeline.stopped)
    return step_model.Hops(
        dispatch_s=first_invoke - timeline.first_submit,
        start_s=statistics.median(r.timings.started_at - r.timings.dispatched_at for r in done),  # type: ignore[operator]
        slot_free_s=stop,
        stop_s=stop,
        completion_s=statistics.median(timeline.resolved[s] - at for s, at in finished.items()),  # type: ignore[operator]
    )


def measure(k: int, args: argparse.Namespace) -> tuple[dict[str, Any], backlog_bench.Timeline]:
    """One run at ``k`` endpoints: the backlog's summary and timeline."""
    rollouts = args.per_endpoint * k
    return backlog_bench.run_timed(
        argparse.Namespace(
            rollouts=rollouts,
            invoke_tps=args.invoke_tps,
            max_sessions=rollouts,
            crash_every=0,
            timeout=60.0,
            sweep_interval=5.0,
            seed=7,
            run_dir=f"{args.run_dir}-{k}",
            max_wait_s=8 * rollouts / (k * args.invoke_tps) + 300,
            finishers=5,
            endpoints=k,
        )
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoints", default="1,2,4", help="endpoint counts, one run each (1,2,4)")
    parser.add_argument("--per-endpoint", type=int, default=60, help="rollouts per endpoint in each step (60)")
    parser.add_argument("--invoke-tps", type=float, default=1.0, help="invokes and stops per second per endpoint (1)")
    parser.add_argument("--run-dir", default=".local-stack/endpoint-scaling", help="logs and state")
    args = parser.parse_args(argv)
    record = results.begin("endpoint_scaling_bench")
    ks = [int(n) for n in args.endpoints.split(",")]
    runs: dict[str, dict[str, Any]] = {}
    calibration: step_model.Hops | None = None
    for k in ks:
        summary, timeline = measure(k, args)
        calibration = calibration or hops_of(timeline)
        done = [r.timings for r in timeline.results.values() if r.timings.dispatched_at and r.timings.finished_at]
        durations = [t.finished_at - t.started_at for t in done if t.started_at]  # type: ignore[operator]
        mean_d = statistics.fmean(t.finished_at - t.dispatched_at for t in done)  # type: ignore[operator]
        rollouts = args.per_endpoint * k
        step = step_model.Step(rollouts, args.invoke_tps, k, rollouts, calibration)
        measured = max(timeline.resolved.values()) - timeline.first_submit
        predicted = step_model.simulate(step, durations)
        bound = step_model.bound_s(step, mean_d)
        kept = 1 / step_model.budget_interval_s(args.invoke_tps)  # the rate the budget hands out
        budget_bound = step_model.bound_s(dataclasses.replace(step, rate=kept), mean_d)
        summary.update(
            rollouts_per_s=round(rollouts / summary["drain_s"], 3),
            bound_per_s=k * args.invoke_tps / 2,
            steady_of_budget=round(summary["steady_dispatch_per_s"] * 2 / (k * kept), 3),
            hops_s={name: round(value, 3) for name, value in vars(hops_of(timeline)).items()},
            step_s=round(measured, 2),
            model_step_s=round(predicted, 2),
            model_error=round(predicted / measured - 1, 3),
            bound_s=round(bound, 2),
            step_over_bound=round(measured / bound, 3),
            budget_bound_s=round(budget_bound, 2),
            step_over_budget_bound=round(measured / budget_bound, 3),
        )
        runs[f"K={k}"] = summary
        print(json.dumps({"endpoints": k, **summary}), flush=True)

    base = runs[f"K={ks[0]}"]["steady_dispatch_per_s"]
    scaling = {f"K={k}": round(runs[f"K={k}"]["steady_dispatch_per_s"] / (k / ks[0] * base), 3) for k in ks}
    projection = step_model.projection(1024, 8.0, 20.0, sessions=900)
    print(json.dumps({"scaling": scaling, "aws_projection": projection}, indent=2), flush=True)
    ok = (
        all(r["lost"] == 0 and r["unexpected"] == 0 for r in runs.values())
        and min(scaling.values()) >= 0.9
        and all(abs(r["model_error"]) <= 0.1 and r["step_over_bound"] <= 1.05 for r in runs.values())
    )
    record.write(
        {
            "per_endpoint": args.per_endpoint,
            "invoke_tps_per_endpoint": args.invoke_tps,
            "calibration_hops_s": {name: round(value, 3) for name, value in vars(calibration).items()},
            "runs": runs,
            "scaling": scaling,
            "aws_projection": projection,
        },
        targets={
            "scaling": ">= 0.9 at every K",
            "model_error": "within 10% at every K",
            "step_over_bound": "<= 1.05 at every K",
            "lost": 0,
            "met": ok,
        },
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
