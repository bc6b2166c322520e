"""Benchmark the local ACR emulator: session starts per second and the latency it adds per invoke.

Run: ``.venv/bin/python benchmarks/acr_emulator_bench.py`` (loopback only, about 60-90 s).

- Cold starts: new sessions of a standard-library agent and of a ``BedrockAgentCoreApp`` agent, one after
  another and (stdlib) four at a time; each start is timed to the end of its first invoke.
- Cold vs fork-server starts (``preload``): a ``BedrockAgentCoreApp`` agent and, when Strands is installed,
  one with the math agent's imports; starts per second (one at a time, and four at a time) and CPU seconds per
  start, counting the emulator, its template processes and every agent process it started (read from
  ``/proc``: own plus reaped children's time), all in the same run.
- Warm starts: new sessions served from a filled warm pool.
- Added latency: the same small JSON invoke sent alternately through the emulator and straight to the
  agent's port (both raw HTTP over keep-alive connections), plus boto3 through the emulator for scale.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import quote

import _results as results
import boto3
import httpx
from botocore.config import Config

import agentcore_rollouts_local  # noqa: F401  (puts local_stack, lambdas, examples on sys.path: D80)
from local_stack.acr_emulator import EmulatorConfig, RuntimeConfig, start_emulator
from rollout_contract import new_session_id
from rollout_contract.protocol import SESSION_HEADER

AGENTS = Path(__file__).resolve().parent.parent / "tests" / "acr_emulator" / "agents"
ARN_PREFIX = "arn:aws:bedrock-agentcore:us-east-1:123456789012:runtime/bench-"
WARM_POOL = 4
SDK_PRELOAD = ("bedrock_agentcore.runtime", "uvicorn")
MATH_IMPORTS = ("strands", "strands.models.openai", "bedrock_agentcore.runtime", "boto3")
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _runtime(name: str, agent: str, **settings: object) -> RuntimeConfig:
    return RuntimeConfig(
        arn=ARN_PREFIX + name, command=(sys.executable, str(AGENTS / agent)), invoke_tps=100_000, **settings
    )


class Bench:
    """One emulator and the clients that measure it."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.http = httpx.Client(trust_env=False, timeout=60)

    def invoke(self, runtime_arn: str, session_id: str, payload: bytes = b"{}") -> httpx.Response:
        response = self.http.post(
            f"{self.url}/runtimes/{quote(runtime_arn, safe='')}/invocations",
            content=payload,
            headers={SESSION_HEADER: session_id, "content-type": "application/json"},
        )
        response.raise_for_status()
        return response

    def stop(self, runtime_arn: str, session_id: str) -> None:
        self.http.post(
            f"{self.url}/runtimes/{quote(runtime_arn, safe='')}/stopruntimesession",
            content=b"{}",
            headers={SESSION_HEADER: session_id},
        ).raise_for_status()

    def timed_start(self, runtime_arn: str) -> tuple[str, float]:
        session_id = new_session_id()
        started = time.perf_counter()
        self.invoke(runtime_arn, session_id)
        return session_id, time.perf_counter() - started

    def starts(self, runtime_arn: str, count: int, concurrency: int = 1) -> tuple[float, float]:
        """Start ``count`` sessions; return (starts per second, median seconds per start)."""
        started = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            results = list(pool.map(lambda _: self.timed_start(runtime_arn), range(count)))
        rate = count / (time.perf_counter() - started)
        for session_id, _ in results:
            self.stop(runtime_arn, session_id)
        return rate, statistics.median(t for _, t in results)

    def admin(self, view: str) -> dict:
        return self.http.get(f"{self.url}/_admin/{view}").json()


def _cpu_seconds(pid: int) -> float:
    """CPU time of a live process plus that of the children it has reaped (utime, stime, cutime, cstime)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(v) for v in fields[11:15]) / _CLOCK_TICKS


class CpuMeter:
    """CPU seconds spent by the emulator, its fork-server templates and every agent process they have reaped."""

    def __init__(self, bench: Bench, emulator_pid: int) -> None:
        self._bench = bench
        self._emulator_pid = emulator_pid

    def total(self) -> float:
        templates = [v["pid"] for v in self._bench.admin("stats")["fork_servers"].values() if v["pid"]]
        return sum(_cpu_seconds(pid) for pid in (self._emulator_pid, *templates))

    def preload_seconds(self, runtime_arn: str) -> float:
        """CPU the runtime's template has spent so far (its one-time preload, before any session)."""
        return _cpu_seconds(self._bench.admin("stats")["fork_servers"][runtime_arn]["pid"])


def _cold_vs_fork(
    bench: Bench, meter: CpuMeter, name: str, cold: RuntimeConfig, forked: RuntimeConfig, count: int
) -> dict[str, Any]:
    preload_cpu = meter.preload_seconds(forked.arn)
    print(f"{name}: preload {', '.join(forked.preload)} (one-time template CPU {preload_cpu:.2f} s)")
    figures: dict[str, Any] = {"template_preload_cpu_s": round(preload_cpu, 2)}
    for mode, runtime in (("cold process start", cold), ("fork-server start", forked)):
        before = meter.total()
        one_rate, one_median = bench.starts(runtime.arn, count)
        four_rate, _ = bench.starts(runtime.arn, count, concurrency=4)
        cpu = (meter.total() - before) / (2 * count)
        print(
            f"  {mode:<19} {one_rate:6.2f} starts/s one at a time (median {one_median * 1000:5.0f} ms), "
            f"{four_rate:6.2f} starts/s four at a time, {cpu:5.3f} CPU s per start"
        )
        figures[mode] = {
            "starts_per_s_sequential": round(one_rate, 2),
            "start_median_ms": round(one_median * 1000),
            "starts_per_s_4_concurrent": round(four_rate, 2),
            "cpu_s_per_start": round(cpu, 3),
        }
    return figures


def _wait_for_fork_servers(bench: Bench, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not all(v["ready"] for v in bench.admin("stats")["fork_servers"].values()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"fork servers not ready after {timeout_s:g}s: {bench.admin('stats')['fork_servers']}")
        time.sleep(0.1)


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return ordered[len(ordered) // 2] * 1000, ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000


def _added_latency(bench: Bench, runtime_arn: str, count: int) -> dict[str, tuple[float, float]]:
    session_id = new_session_id()
    bench.invoke(runtime_arn, session_id)
    port = next(s["port"] for s in bench.admin("sessions")["sessions"] if s["session_id"] == session_id)
    direct_url = f"http://127.0.0.1:{port}/invocations"
    payload = json.dumps({"prompt": "x" * 200}).encode()
    via, direct = [], []
    for _ in range(count):
        started = time.perf_counter()
        bench.invoke(runtime_arn, session_id, payload)
        via.append(time.perf_counter() - started)
        started = time.perf_counter()
        bench.http.post(direct_url, content=payload, headers={SESSION_HEADER: session_id}).raise_for_status()
        direct.append(time.perf_counter() - started)
    client = boto3.client(
        "bedrock-agentcore",
        endpoint_url=bench.url,
        region_name="us-east-1",
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
        config=Config(retries={"total_max_attempts": 1}),
    )
    through_boto3 = []
    for _ in range(count // 2):
        started = time.perf_counter()
        client.invoke_agent_runtime(agentRuntimeArn=runtime_arn, runtimeSessionId=session_id, payload=payload)[
            "response"
        ].read()
        through_boto3.append(time.perf_counter() - started)
    client.close()
    bench.stop(runtime_arn, session_id)
    return {"emulator": _percentiles(via), "direct": _percentiles(direct), "boto3": _percentiles(through_boto3)}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its numbers."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=8, help="sessions per cold-start measurement")
    parser.add_argument("--invokes", type=int, default=400, help="invokes per latency measurement")
    args = parser.parse_args(argv)
    record = results.begin("acr_emulator_bench")
    figures: dict[str, Any] = {}

    stdlib, sdk = _runtime("stdlib", "stdlib_agent.py"), _runtime("sdk", "sdk_agent.py")
    sdk_forked = _runtime("sdk-forked", "sdk_agent.py", preload=SDK_PRELOAD)
    warm = _runtime("warm", "stdlib_agent.py", warm_pool_size=WARM_POOL)
    runtimes = [stdlib, sdk, sdk_forked, warm]
    math = None
    if all(importlib.util.find_spec(name.split(".")[0]) for name in MATH_IMPORTS):
        math = (
            _runtime("math", "math_imports_agent.py"),
            _runtime("math-forked", "math_imports_agent.py", preload=(*MATH_IMPORTS, "uvicorn")),
        )
        runtimes += math
    else:
        print(f"skipping the math agent's imports: one of {', '.join(MATH_IMPORTS)} is not installed")
    logs = Path(tempfile.mkdtemp(prefix="acr-bench-"))
    config = EmulatorConfig(runtimes=tuple(runtimes), log_dir=logs)
    began = time.perf_counter()
    print(f"emulator and agent logs in {logs}")
    with start_emulator(config, log_file=logs / "emulator.log") as emulator:
        bench = Bench(emulator.url)
        print(f"emulator up at {emulator.url}")
        _wait_for_fork_servers(bench)
        meter = CpuMeter(bench, emulator.pid)
        figures["sdk_agent"] = _cold_vs_fork(bench, meter, "BedrockAgentCoreApp agent", sdk, sdk_forked, args.starts)
        if math:
            figures["math_imports_agent"] = _cold_vs_fork(bench, meter, "math agent's imports", *math, args.starts)
        starts = {}
        rate, median = bench.starts(stdlib.arn, args.starts)
        starts["stdlib_sequential"] = (rate, median)
        print(f"cold starts, stdlib agent, sequential:      {rate:6.1f} /s  (median {median * 1000:.0f} ms each)")
        rate, median = bench.starts(stdlib.arn, args.starts, concurrency=4)
        starts["stdlib_4_concurrent"] = (rate, median)
        print(f"cold starts, stdlib agent, 4 concurrent:    {rate:6.1f} /s  (median {median * 1000:.0f} ms each)")
        rate, median = bench.starts(sdk.arn, max(2, args.starts // 2))
        starts["sdk_sequential"] = (rate, median)
        print(f"cold starts, BedrockAgentCoreApp agent:     {rate:6.1f} /s  (median {median * 1000:.0f} ms each)")
        deadline = time.monotonic() + 20
        while bench.admin("stats")["warm_pool"][warm.arn] < WARM_POOL and time.monotonic() < deadline:
            time.sleep(0.05)
        rate, median = bench.starts(warm.arn, WARM_POOL)
        starts["warm_pool_sequential"] = (rate, median)
        figures["starts"] = {
            name: {"per_s": round(rate, 1), "median_ms": round(median * 1000)}
            for name, (rate, median) in starts.items()
        }
        print(
            f"warm-pool starts ({WARM_POOL} pooled), sequential:  {rate:6.1f} /s  (median {median * 1000:.0f} ms each)"
        )
        for runtime in (stdlib, sdk):
            lat = _added_latency(bench, runtime.arn, args.invokes)
            (via50, via99), (dir50, dir99), (b50, b99) = lat["emulator"], lat["direct"], lat["boto3"]
            name = "stdlib" if runtime is stdlib else "BedrockAgentCoreApp"
            print(f"invoke latency, {name} agent, {args.invokes} calls (ms):")
            print(f"  direct to agent   p50 {dir50:6.2f}  p99 {dir99:6.2f}")
            print(f"  via emulator      p50 {via50:6.2f}  p99 {via99:6.2f}")
            ratio = via50 / dir50
            print(f"  added             p50 {via50 - dir50:6.2f}  p99 {via99 - dir99:6.2f}  (ratio p50 {ratio:.2f}x)")
            print(f"  boto3 via emulator p50 {b50:6.2f}  p99 {b99:6.2f}")
            figures[f"invoke_ms_{name}_agent"] = {
                "direct": {"p50": round(dir50, 2), "p99": round(dir99, 2)},
                "via_emulator": {"p50": round(via50, 2), "p99": round(via99, 2)},
                "boto3_via_emulator": {"p50": round(b50, 2), "p99": round(b99, 2)},
            }
        bench.http.close()
    print(f"total {time.perf_counter() - began:.1f} s")
    record.write(figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
