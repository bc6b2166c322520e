"""A backlog against a small runtime quota drains at the quota's pace, and ``timed_out`` lands at the deadline.

The scenario of issue 12: ``--rollouts`` (500) tiny rollouts of the scripted agent
(``tests/e2e/agents/scripted_agent.py``) submitted at once against a runtime that takes ``--invoke-tps``
(5) invokes and stops per second and holds ``--max-sessions`` (20) sessions, the dispatchers' budgets set
to the same quota (what ``rollouts local up --invoke-tps 5 --max-sessions 20`` does). Every
``--crash-every``-th (25th) rollout's agent process dies without a result, so the sweeper must end it
``timed_out``. The rollout timeout (``--timeout``, 20 s) is far shorter than the time the backlog needs
to drain: it runs from each rollout's start, so the waiting ones must not time out.

Baseline, same run: the quota itself. Every rollout needs an invoke and a stop, so the backlog cannot
drain faster than ``2 * rollouts / invoke_tps`` seconds; ``drain_efficiency`` is that ideal over the
time the backlog really took (first submit to last result). One JSON line ends the output:
``submitted``, ``by_status``, ``lost`` (no result by ``--max-wait-s``), ``unexpected`` (a rollout that
should succeed did not, or a crash that did not end ``timed_out``), ``drain_s``, ``ideal_drain_s``,
``drain_efficiency``, ``calls_per_s`` (invokes + stops per second at the emulator), ``steady_dispatch_per_s``
(invokes per second between the 10th and the 90th percentile rollout's invoke), ``throttled``
(calls the emulator refused with 429), ``queue_wait_s`` (submit to invoke, p50/max),
``timed_out_late_s`` (result written minus deadline, p50/p90/max) and ``sweep_interval_s``. The exit
status is 0 only if ``lost == 0 and unexpected == 0``; ``local_errors`` counts futures that failed in the
trainer (by exception type) instead of resolving with a result (they count as lost).

Run: ``.venv/bin/python benchmarks/backlog_bench.py [--rollouts 500] [--invoke-tps 5] [--max-sessions 20]``
(about 4 minutes with the defaults). Logs under ``.local-stack/backlog/``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from collections import Counter
from concurrent.futures import wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _results as results
import httpx

import agentcore_rollouts_local  # noqa: F401  (puts local_stack, lambdas, examples on sys.path: D80)
from local_stack.cli import quota_settings
from local_stack.stack import PROJECT_ROOT, LocalStack, StackSettings
from rollout_contract import RolloutResult, Status
from trainer_client import PollSettings, RolloutClient

EXP_ID = "backlog"
SCRIPTED_AGENT = PROJECT_ROOT / "tests" / "e2e" / "agents" / "scripted_agent.py"
AGENT_PRELOAD = ("agent_app.preload",)


def payload(index: int, crash_every: int, rng: random.Random) -> dict[str, Any]:
    """Rollout ``index``'s payload: a short success, or (every ``crash_every``-th) an agent that dies."""
    if crash_every and index % crash_every == crash_every - 1:
        return {"action": "crash", "sleep_s": 0.05}
    return {"action": "succeed", "sleep_s": round(rng.uniform(0.05, 0.2), 3)}


@dataclass(frozen=True)
class Timeline:
    """What happened to each rollout of a run: its result, when its future resolved, when its session was stopped."""

    first_submit: float
    results: dict[str, RolloutResult]
    resolved: dict[str, float]
    stopped: dict[str, float]


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start a stack with the quota, submit the whole backlog at once, and measure how it drains."""
    return run_timed(args)[0]


def run_timed(args: argparse.Namespace) -> tuple[dict[str, Any], Timeline]:
    """:func:`run`'s summary and the run's :class:`Timeline`."""
    quotas = quota_settings(invoke_tps=args.invoke_tps, max_sessions=args.max_sessions)
    quotas["runtime_options"] = {**quotas["runtime_options"], "preload": AGENT_PRELOAD}
    settings = StackSettings(
        run_dir=Path(args.run_dir).resolve(),
        experiments=(EXP_ID,),
        agent_command=(sys.executable, str(SCRIPTED_AGENT)),
        gateway=False,
        sweep_interval_s=args.sweep_interval,
        finisher_environments=getattr(args, "finishers", 1),
        endpoints=getattr(args, "endpoints", 1),
        **quotas,
    )
    rng = random.Random(args.seed)
    payloads = [payload(i, args.crash_every, rng) for i in range(args.rollouts)]
    with LocalStack(settings) as stack:
        os.environ.update(stack.env)
        poll = PollSettings(wait_time_s=2)
        with RolloutClient.for_experiment(EXP_ID, poll=poll, queue_timeout=args.max_wait_s) as client:
            resolved: dict[str, float] = {}
            first_submit = time.time()
            futures = client.submit([(body, f"backlog-{i}") for i, body in enumerate(payloads)], timeout=args.timeout)
            for future in futures:
                future.add_done_callback(lambda f: resolved.setdefault(f.session_id, time.time()))
            done, _ = wait(futures, timeout=args.max_wait_s)
            last_result = time.time()
        counters = httpx.get(f"{stack.emulator_url}/_admin/stats", timeout=5).json()["counters"]
        calls = httpx.get(f"{stack.emulator_url}/_admin/calls", timeout=5).json()["calls"]
    results = {f.session_id: f.result() for f in done if f.exception() is None}
    local_errors = Counter(type(f.exception()).__name__ for f in done if f.exception() is not None)
    summary = report(args, payloads, futures, results, counters, last_result - first_submit)
    endpoints = next(iter(calls.values()), {})
    summary["endpoint_calls"] = endpoint_use(endpoints, results)
    stopped = {session: at for log in endpoints.values() for at, kind, session in log if kind == "stop"}
    return {**summary, "local_errors": dict(local_errors)}, Timeline(first_submit, results, resolved, stopped)


def endpoint_use(calls: dict[str, list[list[Any]]], results: dict[str, RolloutResult]) -> dict[str, dict[str, Any]]:
    """Per endpoint, the invokes and stops the emulator accepted between the 10th and the 90th percentile rollout's
    invoke (the steady part of the drain), and their rate: how full each endpoint's budget was kept."""
    dispatched = sorted(r.timings.dispatched_at for r in results.values() if r.timings.dispatched_at is not None)
    if len(dispatched) < 10:
        return {}
    start, end = dispatched[int(0.1 * len(dispatched))], dispatched[int(0.9 * len(dispatched))]
    use: dict[str, dict[str, Any]] = {}
    for qualifier, log in sorted(calls.items()):
        kinds = Counter(kind for at, kind, _ in log if start <= at < end)
        use[qualifier] = {
            "invokes": kinds["invoke"],
            "stops": kinds["stop"],
            "calls_per_s": round((kinds["invoke"] + kinds["stop"]) / (end - start), 3) if end > start else None,
        }
    return use


def report(
    args: argparse.Namespace,
    payloads: list[dict[str, Any]],
    futures: list[Any],
    results: dict[str, RolloutResult],
    counters: dict[str, int],
    drain_s: float,
) -> dict[str, Any]:
    """The JSON summary of one run (see the module docstring)."""
    by_status: dict[str, int] = {}
    unexpected = 0
    late: list[float] = []
    queue_wait: list[float] = []
    for body, future in zip(payloads, futures, strict=True):
        result = results.get(future.session_id)
        if result is None:
            continue
        by_status[result.status.value] = by_status.get(result.status.value, 0) + 1
        expected = Status.TIMED_OUT if body["action"] == "crash" else Status.SUCCEEDED
        unexpected += result.status is not expected
        timings = result.timings
        if timings.submitted_at is not None and timings.dispatched_at is not None:
            queue_wait.append(timings.dispatched_at - timings.submitted_at)
        if result.status is Status.TIMED_OUT and timings.dispatched_at and timings.finished_at:
            late.append(timings.finished_at - (timings.dispatched_at + args.timeout))
    dispatched = sorted(r.timings.dispatched_at for r in results.values() if r.timings.dispatched_at is not None)
    tenth, ninetieth = int(0.1 * len(dispatched)), int(0.9 * len(dispatched))
    steady = dispatched[ninetieth] - dispatched[tenth] if ninetieth > tenth else 0.0
    calls = counters.get("invokes", 0) + counters.get("stops", 0)
    ideal_drain_s = 2 * args.rollouts / args.invoke_tps
    return {
        "submitted": len(futures),
        "by_status": dict(sorted(by_status.items())),
        "lost": len(futures) - len(results),
        "unexpected": unexpected,
        "drain_s": round(drain_s, 1),
        "ideal_drain_s": round(ideal_drain_s, 1),
        "drain_efficiency": round(ideal_drain_s / drain_s, 3),
        "calls_per_s": round(calls / drain_s, 2),
        # Invokes per second between the 10th and the 90th percentile rollout's invoke (no start-up, no tail).
        "steady_dispatch_per_s": round((ninetieth - tenth) / steady, 3) if steady > 0 else None,
        "invoke_tps": args.invoke_tps,
        "max_sessions": args.max_sessions,
        "throttled": counters.get("throttles", 0),
        "queue_wait_s": _spread(queue_wait, (0.5, 1.0)),
        "timed_out_late_s": _spread(late, (0.5, 0.9, 1.0)),
        "rollout_timeout_s": args.timeout,
        "sweep_interval_s": args.sweep_interval,
    }


def _spread(values: list[float], quantiles: tuple[float, ...]) -> dict[str, float | None]:
    """``{"p50": ..., "max": ...}`` of ``values`` (``None`` when there are none)."""
    ordered = sorted(values)
    out: dict[str, float | None] = {}
    for q in quantiles:
        name = "max" if q == 1.0 else f"p{int(q * 100)}"
        out[name] = round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2) if ordered else None
    if ordered:
        out["mean"] = round(statistics.fmean(ordered), 2)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=500, help="rollouts submitted at once (500)")
    parser.add_argument("--invoke-tps", type=float, default=5.0, help="runtime quota: invokes and stops per second (5)")
    parser.add_argument("--max-sessions", type=int, default=20, help="runtime quota: active sessions (20)")
    parser.add_argument("--crash-every", type=int, default=25, help="every n-th agent dies without a result (25)")
    parser.add_argument("--timeout", type=float, default=20.0, help="rollout timeout, from its start (20 s)")
    parser.add_argument("--sweep-interval", type=float, default=5.0, help="seconds between sweeper runs (5)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--run-dir", default=".local-stack/backlog", help="logs and state")
    parser.add_argument("--max-wait-s", type=float, default=None, help="give up after (default: 4x the ideal + 300)")
    args = parser.parse_args(argv)
    if args.max_wait_s is None:
        args.max_wait_s = 4 * (2 * args.rollouts / args.invoke_tps) + 300
    record = results.begin("backlog_bench")
    summary = run(args)
    print(json.dumps(summary), flush=True)
    ok = summary["lost"] == 0 and summary["unexpected"] == 0
    record.write(summary, targets={"lost": 0, "unexpected": 0, "met": ok})
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
