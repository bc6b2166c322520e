"""What keeping MoE routing and weight versions costs the token gateway: trace store size and trace read latency.

Three gateways, each a real process on 127.0.0.1 with its SQLite store, in front of the stand-in model:

- ``plain``: rllm-model-gateway 0.1.0 as published (``python -m rllm_model_gateway``): what the traces cost
  before our gateway kept routing and versions (our additions are wrappers around its record builders and store);
- ``ours``: ``python -m trainer_client.gateway`` (routing and weight versions kept), the same stand-in model;
- ``ours-moe``: ours in front of the stand-in as a tiny mixture of experts (``--moe``: 4 layers, top-2 of 8),
  whose every response carries ``routed_experts`` as vLLM's does.

Each gets ``--sessions`` sessions of two streamed calls (as the example agents make them, through the OpenAI SDK's
``stream=True``) and one non-streamed call each; then every session's traces are read back ``--reads`` times with
the trainer's read (``GET /sessions/<sid>/traces``). Reported: store bytes per trace, per completion token and,
with routing, the routing's bytes per routed token next to its size as the server's JSON; read latency p50 / p99
per session; ratios of ``ours`` to ``plain`` (target: within 1.10 for a model without routing).

Run from the repository root with the full venv: ``.venv/bin/python benchmarks/trace_store_bench.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]

import _results as results  # noqa: E402

from local_stack._process import LOCALHOST, ManagedProcess, free_port, http_ready  # noqa: E402
from local_stack.model_endpoint import EndpointSettings  # noqa: E402
from local_stack.model_endpoint.process import model_endpoint_process  # noqa: E402
from trainer_client import TokenTrace  # noqa: E402

MESSAGES = [{"role": "user", "content": "What is 12 + 30? Think it through, then answer."}]


@contextmanager
def gateway(module: str, model_url: str, run_dir: Path) -> Iterator[tuple[str, Path]]:
    """A gateway process (``module``: ``rllm_model_gateway`` or ``trainer_client.gateway``) on SQLite."""
    port, db = free_port(), run_dir / "traces.db"
    config = {
        "host": LOCALHOST,
        "port": port,
        "workers": [{"url": f"{model_url}/v1", "worker_id": "model"}],
        "store_worker": "sqlite",
        "db_path": str(db),
        "sync_traces": True,
        "log_level": "WARNING",
    }
    (run_dir / "gateway.yaml").write_text(json.dumps(config))
    url = f"http://{LOCALHOST}:{port}"
    process = ManagedProcess(
        name=module,
        # Ours takes every caller here (--open): the benchmark measures the trace store, not the key check.
        argv=[sys.executable, "-m", module, "--config", str(run_dir / "gateway.yaml")]
        + (["--open"] if module == "trainer_client.gateway" else []),
        log_path=run_dir / "gateway.log",
        env=dict(os.environ),
        url=url,
        ready=http_ready(f"{url}/health"),
    )
    process.start()
    try:
        process.wait_ready(60)
        yield url, db
    finally:
        process.stop()


@contextmanager
def model(run_dir: Path, *, moe: bool) -> Iterator[str]:
    process = model_endpoint_process(run_dir=run_dir, base_env=os.environ, settings=EndpointSettings(moe=moe))
    process.start()
    try:
        process.wait_ready(60)
        yield str(process.url)
    finally:
        process.stop()


def call(http: httpx.Client, url: str, *, stream: bool) -> None:
    body = {"model": "stand-in", "messages": MESSAGES, "stream": stream}
    if stream:
        with http.stream("POST", f"{url}/chat/completions", json=body) as response:
            response.raise_for_status()
            for _ in response.iter_lines():
                pass
    else:
        http.post(f"{url}/chat/completions", json=body).raise_for_status()


def measure(url: str, db: Path, sessions: int, reads: int) -> dict[str, Any]:
    ids = [str(uuid.uuid4()) for _ in range(sessions)]
    with httpx.Client(timeout=60) as http:
        for sid in ids:
            for stream in (True, True, False):
                call(http, f"{url}/sessions/{sid}/v1", stream=stream)
        latencies: list[float] = []
        traces: list[TokenTrace] = []
        for round_ in range(reads):
            for sid in ids:
                started = time.perf_counter()
                response = http.get(f"{url}/sessions/{sid}/traces")
                latencies.append((time.perf_counter() - started) * 1000)
                if round_ == 0:
                    traces += [TokenTrace.model_validate(trace) for trace in response.json()]
    completion = sum(len(trace.completion_token_ids) for trace in traces)
    routed = [trace.routed_experts for trace in traces if trace.routed_experts is not None]
    figures: dict[str, Any] = {
        "traces": len(traces),
        "store_bytes": db.stat().st_size,
        "store_bytes_per_trace": round(db.stat().st_size / len(traces), 1),
        "store_bytes_per_completion_token": round(db.stat().st_size / completion, 1),
        "read_ms_p50": round(statistics.median(latencies), 2),
        "read_ms_p99": round(statistics.quantiles(latencies, n=100)[98], 2),
        "traces_with_routing": len(routed),
        "traces_with_weight_version_field": sum(trace.weight_version is not None for trace in traces),
    }
    if routed:
        tokens = sum(routing.tokens for routing in routed)
        figures["routing_bytes_per_token"] = routed[0].bytes_per_token
        figures["routing_json_bytes_per_token"] = round(sum(len(json.dumps(r.nested())) for r in routed) / tokens, 1)
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100, help="sessions per gateway (default 100)")
    parser.add_argument("--reads", type=int, default=5, help="reads of every session's traces (default 5)")
    args = parser.parse_args(argv)
    run = results.begin("trace_store_bench")
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="trace-store-") as tmp, ExitStack() as stack:
        root = Path(tmp)
        for name, module, moe in (
            ("plain", "rllm_model_gateway", False),
            ("ours", "trainer_client.gateway", False),
            ("ours-moe", "trainer_client.gateway", True),
        ):
            run_dir = root / name
            run_dir.mkdir()
            model_url = stack.enter_context(model(run_dir, moe=moe))
            with gateway(module, model_url, run_dir) as (url, db):
                figures[name] = measure(url, db, args.sessions, args.reads)
            print(name, json.dumps(figures[name]))
    plain, ours = figures["plain"], figures["ours"]
    figures["ratios_ours_to_plain"] = {
        "store_bytes_per_trace": round(ours["store_bytes_per_trace"] / plain["store_bytes_per_trace"], 3),
        "read_ms_p50": round(ours["read_ms_p50"] / plain["read_ms_p50"], 3),
    }
    print("ours / plain:", json.dumps(figures["ratios_ours_to_plain"]))
    run.write(figures, targets={"ours_to_plain_store_and_read": "<= 1.10"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
