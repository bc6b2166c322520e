"""Benchmark: does ART's unmodified client on one of our experiments slow our client? (D55)

ART 0.2.0's ``RolloutClient`` reads its results from S3 and never touches the completion queue, so each of its
rollouts leaves a result event there that no trainer of ours owns. Before D55 our poller handed such events
back, they circulated at the queue's head, and after 15-30 of ART's rollouts our ``invoke().result()`` timed out
at 45-60 s for a result written after about 1 s. One local stack, one agent (``agents/latency_agent.py``,
``duration_s`` long, no model calls), two experiments, three phases in the same run:

1. **alone**: our client runs ``--rollouts`` rollouts, ``--concurrency`` threads each doing
   ``invoke(...).result()`` one after the other;
2. **ART elsewhere**: the same while ART's client runs ``--art-rollouts`` rollouts (``run_batch``,
   ``--art-concurrency`` sessions at once, started first) on another experiment of the stack: the same load,
   no foreign event in our completion queue;
3. **ART on ours**: the same with ART's batch on our experiment.

Printed per phase, for our rollouts: invoke -> result (``future.elapsed()``) and result written -> future
resolved (the agent's ``timings.finished_at`` to a done callback), p50 / p95 / max, and the ratio of phase 3
over phase 2 (what ART's events in our queue cost, at the same load) and over phase 1; then how long after
ART's batch on ours the completion queue is empty (its events deleted by our poller, not handed back to
circulate; a rollout of ours stays pending meanwhile, so our poller keeps receiving), what reached the DLQ,
and how many of ART's rollouts succeeded. Agents share the machine's cores with ART's rollouts, so invoke ->
result grows with the load; written -> resolved is what a starved queue would grow.

Needs ART (``make ml-env``): ``.venv-ml/bin/python benchmarks/art_traffic_bench.py [--rollouts 24]
[--concurrency 4] [--art-rollouts 48] [--art-concurrency 6] [--duration-s 1]``. About 3 minutes on 2 cores;
logs under ``.local-stack/bench-art-traffic/``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import _results as results
from agentcore_rl_toolkit import RolloutClient as ArtClient

import agentcore_rollouts_local  # noqa: F401  (puts local_stack, lambdas, examples on sys.path: D80)
from local_stack.hosting import DEFAULT_MODEL_NAME
from local_stack.moto_server import LOCAL_ACCESS_KEYS
from local_stack.stack import DEFAULT_RUN_DIR, LocalStack, StackSettings
from rollout_contract.resources import ExperimentResources
from trainer_client import PollSettings, RolloutClient, RolloutFuture

EXP_ID = "arttraffic"
#: Another experiment on the same stack: ART's traffic there loads the machine alike but sends no event to ours.
OTHER_EXP_ID = "artother"
AGENT = Path(__file__).parent / "agents" / "latency_agent.py"


class Sample(NamedTuple):
    """One of our rollouts: invoke -> result, and result written -> future resolved (seconds)."""

    elapsed_s: float
    delivery_s: float


class Phase(NamedTuple):
    """Our rollouts of one phase, and how many of ART's rollouts running meanwhile succeeded."""

    ours: list[Sample]
    art_succeeded: int


def run_ours(client: RolloutClient, count: int, concurrency: int, duration_s: float, tag: str) -> list[Sample]:
    """``count`` rollouts, ``concurrency`` threads each calling ``invoke(...).result()`` in turn."""

    def one(index: int) -> Sample:
        resolved: list[float] = []
        future: RolloutFuture = client.invoke(
            {"calls": 0, "duration_s": duration_s}, input_id=f"{tag}-{index}", model_id=DEFAULT_MODEL_NAME
        )
        future.add_done_callback(lambda _: resolved.append(time.time()))
        result = future.result(timeout=300)
        result.raise_for_status()
        finished_at = result.timings.finished_at
        assert finished_at is not None, "the agent wrote no timings"
        return Sample(future.elapsed(), resolved[0] - finished_at)

    with ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(one, range(count)))


def art_client(stack: LocalStack, exp_id: str) -> ArtClient:
    """ART's unmodified client on experiment ``exp_id``.

    It HEAD-polls, so it needs s3:ListBucket (a missing key is 403 without): it is built with the
    administrator's key, as an ART user's role would hold that grant (boto3 reads the key when it is built).
    """
    descriptor = stack.descriptors[exp_id]
    trainer_key = os.environ["AWS_ACCESS_KEY_ID"]
    os.environ["AWS_ACCESS_KEY_ID"] = LOCAL_ACCESS_KEYS["admin"]
    try:
        return ArtClient(descriptor.runtime_arn, descriptor.results_bucket, exp_id, model_id=DEFAULT_MODEL_NAME)
    finally:
        os.environ["AWS_ACCESS_KEY_ID"] = trainer_key


def run_art(client: ArtClient, count: int, concurrency: int, duration_s: float) -> int:
    """ART's batch of ``count`` rollouts; the number that succeeded."""
    payloads = [{"calls": 0, "duration_s": duration_s}] * count
    items = client.run_batch(payloads, max_concurrent_sessions=concurrency, timeout=300, log_interval=3600)
    return sum(1 for item in items if item.success)


def percentiles(values: Sequence[float]) -> dict[str, float]:
    """p50, p95 and max of ``values`` in seconds."""
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"p50": round(statistics.median(ordered), 3), "p95": round(p95, 3), "max": round(ordered[-1], 3)}


def quantiles(values: Sequence[float]) -> str:
    return "  ".join(f"{name} {value:6.2f} s" for name, value in percentiles(values).items())


def completion_messages(client: RolloutClient) -> tuple[int, int]:
    """Messages (visible and in flight) in the experiment's completion queue and in its DLQ."""
    completion = ExperimentResources.for_experiment(EXP_ID).completion_queue
    depths = {queue.name: queue.visible + queue.in_flight for queue in client.status(recent=0).queues}
    return depths[completion.name], depths[completion.dlq_name]


def seconds_to_drain(client: RolloutClient, limit_s: float = 60.0) -> float | None:
    """Seconds until the completion queue is empty (our poller receiving), or ``None`` after ``limit_s``."""
    started = time.monotonic()
    while completion_messages(client)[0]:
        if time.monotonic() - started > limit_s:
            return None
        time.sleep(0.5)
    return time.monotonic() - started


def with_art_traffic(stack: LocalStack, client: RolloutClient, exp_id: str, args: argparse.Namespace) -> Phase:
    """Our rollouts while ART's client runs its batch on experiment ``exp_id`` (started first)."""
    art = art_client(stack, exp_id)
    succeeded: list[int] = []
    thread = threading.Thread(
        target=lambda: succeeded.append(run_art(art, args.art_rollouts, args.art_concurrency, args.duration_s))
    )
    thread.start()
    samples = run_ours(client, args.rollouts, args.concurrency, args.duration_s, f"with-art-{exp_id}")
    thread.join()
    return Phase(samples, succeeded[0] if succeeded else 0)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=24)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--art-rollouts", type=int, default=48)
    parser.add_argument("--art-concurrency", type=int, default=6)
    parser.add_argument("--duration-s", type=float, default=1.0)
    args = parser.parse_args(argv)
    record = results.begin("art_traffic_bench")

    settings = StackSettings(
        run_dir=DEFAULT_RUN_DIR / "bench-art-traffic",
        experiments=(EXP_ID, OTHER_EXP_ID),
        agent_command=(sys.executable, str(AGENT)),
        gateway=False,
        sweep_interval_s=1.0,
        runtime_options={"preload": ("boto3", "uvicorn", "httpx", "bedrock_agentcore.runtime")},
    )
    with LocalStack(settings) as stack:
        os.environ.update(stack.env)
        poll = PollSettings(wait_time_s=1, deadline_grace_s=30)
        with RolloutClient.for_experiment(EXP_ID, poll=poll) as client:
            run_ours(client, args.concurrency, args.concurrency, args.duration_s, "warm")  # warm the agents
            phases = {"alone": Phase(run_ours(client, args.rollouts, args.concurrency, args.duration_s, "alone"), 0)}
            phases["ART elsewhere"] = with_art_traffic(stack, client, OTHER_EXP_ID, args)
            # one rollout of ours pending throughout, so our poller keeps receiving after our last result
            watcher = client.invoke({"calls": 0, "duration_s": 600}, input_id="watcher", model_id=DEFAULT_MODEL_NAME)
            phases["ART on ours"] = with_art_traffic(stack, client, EXP_ID, args)
            drain_s = seconds_to_drain(client)
            dlq_depth = completion_messages(client)[1]
            watcher.cancel()

    print(f"load: {os.getloadavg()[0]:.2f} (1 min)  agent duration {args.duration_s} s")
    print(f"ours: {args.rollouts} rollouts, {args.concurrency} at once")
    print(f"ART's: {args.art_rollouts} rollouts, {args.art_concurrency} at once")
    for name, phase in phases.items():
        print(f"{name:>13}  invoke->result   {quantiles([s.elapsed_s for s in phase.ours])}")
        print(f"{'':>13}  written->result  {quantiles([s.delivery_s for s in phase.ours])}")
    delivery = {name: statistics.median(s.delivery_s for s in phase.ours) for name, phase in phases.items()}
    print(
        f"written->result p50, ART on ours / ART elsewhere: {delivery['ART on ours'] / delivery['ART elsewhere']:.2f}"
        f", / alone: {delivery['ART on ours'] / delivery['alone']:.2f}"
    )
    for name in ("ART elsewhere", "ART on ours"):
        print(f"{name}: ART's rollouts succeeded {phases[name].art_succeeded}/{args.art_rollouts}")
    drained = "not within 60 s" if drain_s is None else f"within {drain_s:.1f} s"
    print(f"after ART's batch on ours: completion queue empty {drained}, {dlq_depth} in its DLQ")
    record.write(
        {
            **{
                name: {
                    "invoke_to_result_s": percentiles([s.elapsed_s for s in phase.ours]),
                    "written_to_result_s": percentiles([s.delivery_s for s in phase.ours]),
                    "art_succeeded": phase.art_succeeded,
                }
                for name, phase in phases.items()
            },
            "written_to_result_p50_art_on_ours_over_elsewhere": round(
                delivery["ART on ours"] / delivery["ART elsewhere"], 2
            ),
            "completion_queue_drained_s": drain_s,
            "completion_dlq_depth": dlq_depth,
        }
    )


if __name__ == "__main__":
    main()
