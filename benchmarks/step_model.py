"""A model of one GRPO step's rollouts: N submitted at once, how long until the trainer holds the last result.

:func:`simulate` plays the step slot by slot. The invoke quota is ``rate`` calls per second per endpoint, ``K``
endpoints; every rollout spends ``tokens_per_rollout`` of them (the invoke and the stop). Our dispatcher's budget
spaces its slots at :func:`budget_interval_s` (the 4% lateness and 1% headroom of ``rollout_budgets.tps``), and a
stop takes the next slot before any invoke (D21, D90); a rollout is invoked once a session slot of the ``S`` is
free. Its session is held ``start_s`` (the invoke to the agent's handler: a cold start on AWS) plus its duration
``d`` plus ``slot_free_s`` (result stored to slot freed, D90); its stop is asked for ``stop_s`` after the result;
the trainer holds the result ``completion_s`` after it was stored (S3 -> EventBridge -> SQS -> the trainer's
poller). ART's client is modelled from its source (awslabs/agentcore-rl-toolkit, ``client.py``): one limiter per
process spacing every call ``1 / tps_limit`` apart in arrival order (invokes and ``cancel()`` stops alike),
``max_concurrent_sessions`` futures held from the invoke until the result is found and the session stopped, and
each result found by S3 HEAD polls at 0, then intervals from 0.75 s growing 1.5x up to 30 s.

:func:`bound_s` is issue 37's bound: ``max(N x tokens / (rate x K), N x d / S) + d`` (``d`` the mean duration).

The hop figures for AWS (:data:`AWS_HOPS`) name their sources; where no figure is published they are assumptions,
said so. The twin's own hops are measured by ``endpoint_scaling_bench.py``, which checks the model against the twin
(predicted vs measured step time) and prints :func:`projection` for the seeds' settings.

Run: ``.venv/bin/python benchmarks/step_model.py [--rollouts 1024] [--median-s 8] [--p90-s 20]`` prints the
projection alone.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import random
import sys
from dataclasses import asdict, dataclass, replace
from typing import Any

#: ``rollout_budgets.tps``'s spacing: a send may come this late after its slot, slots spaced for this share.
_MAX_LATENESS_S = 0.04
_TPS_HEADROOM = 0.99
#: ART's HEAD polling (``RolloutFuture``): first poll at once, then these intervals, x1.5 each, capped.
ART_FIRST_INTERVAL_S = 0.75
ART_BACKOFF = 1.5
ART_MAX_INTERVAL_S = 30.0


@dataclass(frozen=True)
class Hops:
    """Seconds each hop adds to a rollout (see the module docstring)."""

    dispatch_s: float
    start_s: float
    slot_free_s: float
    stop_s: float
    completion_s: float


#: AWS's hops for our system. ``start_s``: no official cold-start figure; a third-party report of P75 about 2 s
#: (quoted in the project's ACR notes) is taken. ``completion_s``: S3 -> EventBridge is "typically delivered in
#: seconds" (S3 event notifications page, no figure): assumed 1 s, plus an SQS long poll's wake-up (assumed 0.1 s).
#: ``dispatch_s``: SQS -> Lambda event source polling, assumed 0.5 s. ``slot_free_s`` and ``stop_s``: the same
#: event path to the finisher (1.1 s) plus its writes, assumed 1.2 s.
AWS_HOPS = Hops(dispatch_s=0.5, start_s=2.0, slot_free_s=1.2, stop_s=1.2, completion_s=1.1)


@dataclass(frozen=True)
class Step:
    """One step's setting: ``rollouts`` submitted at once under ``rate`` x ``endpoints`` and ``sessions``."""

    rollouts: int
    rate: float
    endpoints: int
    sessions: int
    hops: Hops
    tokens_per_rollout: int = 2
    timeout_s: float = math.inf


def budget_interval_s(rate: float) -> float:
    """Seconds between two slots of one endpoint's budget (``rollout_budgets.tps.TpsBudget.interval_s``)."""
    if rate >= 1:
        return (1.0 + _MAX_LATENESS_S) / (math.floor(rate) * _TPS_HEADROOM)
    return 1.0 / (rate * _TPS_HEADROOM)


def art_detect_s(done_after_s: float) -> float:
    """When ART's HEAD polls, counted from the invoke, first find a result stored ``done_after_s`` after it."""
    at, interval = 0.0, ART_FIRST_INTERVAL_S
    while at < done_after_s:
        at += interval
        interval = min(interval * ART_BACKOFF, ART_MAX_INTERVAL_S)
    return at


def simulate(step: Step, durations: list[float], *, art: bool = False) -> float:
    """Seconds from submitting ``step`` to the trainer holding every result (``durations``: one per rollout).

    ``art``: ART's client instead of ours (its limiter at ``1 / rate`` with no stop precedence, its sessions held
    until the stop, its results found by polling).
    """
    hops = step.hops
    interval = 1 / step.rate if art else budget_interval_s(step.rate)
    interval /= step.endpoints
    waiting = [min(d, step.timeout_s) for d in durations]
    waiting.reverse()  # popped from the end: submission order
    free_sessions = step.sessions
    frees: list[float] = []  # when held session slots come free
    stops: list[float] = []  # when stops ask for their token
    seen = 0.0
    slot = hops.dispatch_s
    while waiting or stops:
        while frees and frees[0] <= slot:
            heapq.heappop(frees)
            free_sessions += 1
        if stops and stops[0] <= slot and (not art or not (waiting and free_sessions)):
            heapq.heappop(stops)  # ours: a stop first; ART: its invokes come first in its loop
        elif waiting and free_sessions:
            free_sessions -= 1
            duration = waiting.pop()
            stored = slot + hops.start_s + duration
            if art:
                found = slot + art_detect_s(hops.start_s + duration)
                seen = max(seen, found)
                heapq.heappush(stops, found)  # run_batch cancels the session once the result is found
                heapq.heappush(frees, found + interval)  # and drops the future after that stop
            else:
                seen = max(seen, stored + hops.completion_s)
                heapq.heappush(stops, stored + hops.stop_s)
                heapq.heappush(frees, stored + hops.slot_free_s)
        else:
            upcoming = [t for t in (stops[:1] + (frees[:1] if waiting else [])) if t > slot]
            if upcoming:  # idle until something happens: jump to the first slot after it
                slot += max(1, math.ceil((min(upcoming) - slot) / interval)) * interval
                continue
        slot += interval
    return seen


def bound_s(step: Step, mean_duration_s: float) -> float:
    """Issue 37's bound: ``max(N x tokens / (rate x K), N x d / S) + d``."""
    n, d = step.rollouts, mean_duration_s
    return max(n * step.tokens_per_rollout / (step.rate * step.endpoints), n * d / step.sessions) + d


def lognormal_durations(n: int, median_s: float, p90_s: float, *, seed: int = 7) -> list[float]:
    """``n`` durations of a log-normal distribution with that median and 90th percentile."""
    sigma = math.log(p90_s / median_s) / 1.2816
    rng = random.Random(seed)
    return [median_s * math.exp(sigma * rng.gauss(0, 1)) for _ in range(n)]


def projection(rollouts: int, median_s: float, p90_s: float, *, sessions: int, rate: float = 25.0) -> dict[str, Any]:
    """Step time on AWS for ART's client and for ours at K = 1 and 10 (the seeds' ``tps_limit=25``,
    ``session_timeout=300``), with each one's bound."""
    durations = lognormal_durations(rollouts, median_s, p90_s)
    mean = sum(durations) / len(durations)
    base = Step(rollouts, rate, 1, sessions, AWS_HOPS, timeout_s=300.0)
    cases = {"ART (polling, its limiter)": (base, True), "ours K=1": (base, False)}
    cases["ours K=10"] = (replace(base, endpoints=10), False)
    out: dict[str, Any] = {
        "rollouts": rollouts,
        "duration_s": {"median": median_s, "p90": p90_s, "mean": round(mean, 2)},
        "tps_limit": rate,
        "sessions": sessions,
        "session_timeout_s": 300.0,
        "aws_hops_s": asdict(AWS_HOPS),
    }
    for name, (step, art) in cases.items():
        predicted = simulate(step, durations, art=art)
        out[name] = {"step_s": round(predicted, 1), "bound_s": round(bound_s(step, mean), 1)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=1024, help="rollouts per step (1024)")
    parser.add_argument("--median-s", type=float, default=8.0, help="median rollout duration on AWS (8 s, assumed)")
    parser.add_argument("--p90-s", type=float, default=20.0, help="90th percentile duration (20 s, assumed)")
    parser.add_argument("--sessions", type=int, default=900, help="session budget: 0.9 x the 1,000 quota (900)")
    args = parser.parse_args(argv)
    print(json.dumps(projection(args.rollouts, args.median_s, args.p90_s, sessions=args.sessions), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
