"""Benchmark sandbox sessions on the local stack: our ``SandboxClient`` against ART 0.2.0's, same stack, same daemon.

One local stack hosts the sandbox experiment (``local_stack.sandbox.sandbox_settings``). For each client, in
alternating rounds (so machine load hits both alike), ``--sandboxes`` sandboxes are started and in each
``--execs`` commands (``true``) run. Printed per client, p50 / p99 in milliseconds:

1. start: ``client.start()`` until it returns (ours: the slot transaction, the start call, the deadline write;
   both: ACR's session start, which forks the daemon from the emulator's template);
2. exec fg: ``sb.exec(["true"])``, one foreground round trip;
3. exec bg + get: ``sb.exec(["true"], background=True)`` then ``handle.result()`` (ART's polls from 0.1 s;
   ours waits with one foreground call of the same invocation id);
4. terminate: ``sb.terminate()`` (ours: the stop and the slot's release; ART's: a stop action and the stop).

ART's client is the baseline: ours does more per call (an invoke token from the shared budget, a DynamoDB update)
and more per sandbox (a slot, a record, a deadline); this measures what that costs.

Run (needs ART, so the ML environment): ``/work/heavy .venv-ml/bin/python benchmarks/sandbox_bench.py
[--sandboxes 8] [--execs 10]``. About a minute on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _results as results
from agentcore_rl_toolkit.sandbox import SandboxClient as ArtSandboxClient

import agentcore_rollouts_local  # noqa: F401  (puts local_stack, lambdas, examples on sys.path: D80)
from local_stack._process import environment
from local_stack.sandbox import sandbox_settings
from local_stack.stack import LocalStack
from trainer_client.sandbox import SandboxClient

EXP = "sbx-bench"
STEPS = ("start", "exec fg", "exec bg + get", "terminate")


def _timed(timings: dict[str, list[float]], step: str, call: Callable[[], Any]) -> Any:
    started = time.perf_counter()
    value = call()
    timings[step].append((time.perf_counter() - started) * 1000)
    return value


def _round(client: Any, timings: dict[str, list[float]], execs: int) -> None:
    sandbox = _timed(timings, "start", client.start)
    for _ in range(execs):
        assert _timed(timings, "exec fg", lambda: sandbox.exec(["true"])).exit_code == 0
        assert _timed(timings, "exec bg + get", lambda: sandbox.exec(["true"], background=True).result()).exit_code == 0
    _timed(timings, "terminate", sandbox.terminate)


def _percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def main() -> None:
    """Run the benchmark and print its table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sandboxes", type=int, default=8, help="sandboxes started per client")
    parser.add_argument("--execs", type=int, default=10, help="commands of each kind per sandbox")
    args = parser.parse_args()
    record = results.begin("sandbox_bench")
    run_dir = Path(tempfile.mkdtemp(prefix="sandbox-bench-"))
    settings = sandbox_settings(run_dir=run_dir, experiments=(EXP,), gateway=False)
    with LocalStack(settings) as stack, environment(stack.env):
        clients = {
            "ART 0.2.0": ArtSandboxClient(runtime_arn=stack.descriptors[EXP].runtime_arn),
            "ours": SandboxClient.for_experiment(EXP),
        }
        timings = {name: {step: [] for step in STEPS} for name in clients}
        for client in clients.values():  # one warm-up round each (imports, connections, the fork template)
            _round(client, {step: [] for step in STEPS}, 1)
        for _ in range(args.sandboxes):
            for name, client in clients.items():
                _round(client, timings[name], args.execs)
    load = os.getloadavg()
    print(f"{args.sandboxes} sandboxes per client, {args.execs} commands of each kind per sandbox; load average "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")  # fmt: skip
    print(
        f"{'step':<16}"
        + "".join(f"{name + ' p50':>14}{name + ' p99':>14}" for name in clients)
        + f"{'ours/ART p50':>14}"
    )
    for step in STEPS:
        cells = "".join(
            f"{_percentile(timings[name][step], 50):>14.1f}{_percentile(timings[name][step], 99):>14.1f}"
            for name in clients
        )
        ratio = _percentile(timings["ours"][step], 50) / _percentile(timings["ART 0.2.0"][step], 50)
        print(f"{step:<16}{cells}{ratio:>14.2f}")
    record.write(
        {
            f"{step}_ms": {
                name: {
                    "p50": round(_percentile(timings[name][step], 50), 1),
                    "p99": round(_percentile(timings[name][step], 99), 1),
                }
                for name in clients
            }
            for step in STEPS
        }
    )


if __name__ == "__main__":
    main()
