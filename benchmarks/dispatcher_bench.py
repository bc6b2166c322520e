"""Benchmark: N concurrent dispatchers drain a backlog against one shared TPS budget.

Each dispatcher is a thread running the real ``lambdas.dispatcher.dispatch`` over a shared backlog (an
in-memory stand-in for the dispatch queue that honours re-queue delays). The budget and the sessions
table live in DynamoDB served by a moto server in its own process on 127.0.0.1; ACR is a fast double
that records when each invoke arrives. Printed: the most invokes that arrived in any 1-second sliding
window (must be <= the limit) and the achieved rate over the limit (target >= 0.95).

The moto server handles one request at a time (connections stay concurrent): moto applies conditional
writes without a lock, so concurrent requests could both pass the same condition, which real DynamoDB
never allows.

Usage: ``python benchmarks/dispatcher_bench.py --duration 60 --dispatchers 8 --tps-limit 25``
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import io
import itertools
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import _results as results

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lambdas.dispatcher import DispatchOutcome, dispatch  # noqa: E402
from lambdas.exceptions import RequeueError  # noqa: E402
from lambdas.observability import logger  # noqa: E402
from lambdas.runtime import AwsClients, Runtime  # noqa: E402
from rollout_budgets.errors import NoTokenError  # noqa: E402
from rollout_contract.aws import ClientFactory  # noqa: E402
from rollout_contract.messages import DispatchRequest  # noqa: E402
from rollout_contract.resources import BUDGET_TABLE, ExperimentResources, HandlerSettings  # noqa: E402

REGION = "us-east-1"
EXP_ID = "bench"
BUCKET = "bench-results"
RUNTIME_ARN = "arn:aws:bedrock-agentcore:us-east-1:123456789012:runtime/rollout_bench-0000000000"
_MOTO_SERVER = """
import threading
from moto.server import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import make_server
app = DomainDispatcherApplication(create_backend_app)
lock = threading.Lock()
def serialized(environ, start_response):
    with lock:
        return list(app(environ, start_response))
server = make_server("127.0.0.1", 0, serialized, threaded=True)
print(server.port, flush=True)
server.serve_forever()
"""


class AcrDouble:
    """Answers every invoke with 200 at once and records its arrival time."""

    def __init__(self) -> None:
        self.arrivals: list[float] = []
        lock = threading.Lock()
        arrivals = self.arrivals

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                now = time.time()
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path.split("?")[0].endswith("/invocations"):
                    with lock:
                        arrivals.append(now)
                body = b'{"status":"processing"}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base class's name)
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> AcrDouble:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class Backlog:
    """The dispatch queue's stand-in: messages become visible again after their re-queue delay."""

    def __init__(self, requests: list[DispatchRequest]) -> None:
        self._heap = [(0.0, index, request, 1) for index, request in enumerate(requests)]
        self._seq = itertools.count(len(requests))
        self._lock = threading.Lock()

    def take(self) -> tuple[DispatchRequest, int] | None:
        with self._lock:
            if not self._heap or self._heap[0][0] > time.time():
                return None
            _, _, request, receive_count = heapq.heappop(self._heap)
            return request, receive_count

    def requeue(self, request: DispatchRequest, receive_count: int, delay_s: float) -> None:
        with self._lock:
            heapq.heappush(self._heap, (time.time() + delay_s, next(self._seq), request, receive_count + 1))


def start_moto() -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-c", _MOTO_SERVER], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    port = int(process.stdout.readline())
    return process, f"http://127.0.0.1:{port}"


def dispatch_fully(request: DispatchRequest, receive_count: int, rt: Runtime) -> str:
    """The whole dispatcher path: sessions table, session budget, result check, TPS budget, invoke."""
    return dispatch(request, receive_count=receive_count, rt=rt).value


def invoke_in_budget(request: DispatchRequest, receive_count: int, rt: Runtime) -> str:
    """The TPS part of the dispatcher path only: reserve a slot, wait for it, invoke."""
    try:
        slot_start = rt.acr.tps.reserve(horizon_s=rt.acr.max_wait_s)
        rt.acr.invoke(request.session_id, rt.acr.encode(request.payload or {}), slot_start=slot_start)
    except NoTokenError as exc:
        raise RequeueError("invoke budget reserved beyond the allowed wait", exc.retry_after_s) from exc
    return DispatchOutcome.INVOKED.value


def max_in_any_second(times: list[float]) -> int:
    """The most timestamps in any half-open 1-second window."""
    times = sorted(times)
    best = left = 0
    for right, t in enumerate(times):
        while t - times[left] >= 1.0:
            left += 1
        best = max(best, right - left + 1)
    return best


def run(args: argparse.Namespace) -> dict[str, float]:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
    }.items():
        os.environ.setdefault(name, value)
    logger.setLevel("WARNING")
    moto, moto_url = start_moto()
    try:
        with AcrDouble() as acr:
            endpoints = {"s3": moto_url, "sqs": moto_url, "dynamodb": moto_url, "bedrock-agentcore": acr.url}
            clients = AwsClients.build(ClientFactory(region=REGION, endpoints=endpoints))
            resources = ExperimentResources.for_experiment(EXP_ID)
            clients.s3.create_bucket(Bucket=BUCKET)
            clients.dynamodb.create_table(**resources.sessions_table.create_table_request())
            clients.dynamodb.create_table(**BUDGET_TABLE.create_table_request())
            settings = HandlerSettings(
                exp_id=EXP_ID,
                results_bucket=BUCKET,
                sessions_table=resources.sessions_table.name,
                budget_table=BUDGET_TABLE.name,
                runtime_arn=RUNTIME_ARN,
                dispatch_queue_url=f"{moto_url}/123456789012/{resources.dispatch_queue.name}",
                tps_limit=args.tps_limit,
                session_budget=1_000_000,
            )
            backlog_size = int(args.tps_limit * args.duration * 1.5) + 50
            backlog = Backlog(
                [
                    DispatchRequest(
                        exp_id=EXP_ID, input_id="p", session_id=str(uuid.uuid4()), payload={"i": i}, timeout_s=3600
                    )
                    for i in range(backlog_size)
                ]
            )
            deadline = time.time() + args.duration
            outcomes: dict[str, int] = {}
            lock = threading.Lock()

            def dispatcher() -> None:
                rt = Runtime.build(settings, clients)
                handle = dispatch_fully if args.mode == "full" else invoke_in_budget
                while time.time() < deadline:
                    taken = backlog.take()
                    if taken is None:
                        time.sleep(0.01)
                        continue
                    request, receive_count = taken
                    try:
                        outcome = handle(request, receive_count, rt)
                    except RequeueError as exc:
                        backlog.requeue(request, receive_count, exc.delay_s)
                        outcome = f"requeued: {exc.reason}"
                    with lock:
                        outcomes[outcome] = outcomes.get(outcome, 0) + 1

            threads = [threading.Thread(target=dispatcher) for _ in range(args.dispatchers)]
            with contextlib.redirect_stdout(io.StringIO()):  # the handlers' EMF metric lines
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
            arrivals = sorted(acr.arrivals)
    finally:
        moto.terminate()
        moto.wait(timeout=10)
    span = arrivals[-1] - arrivals[0] if len(arrivals) > 1 else float("nan")
    rate = (len(arrivals) - 1) / span if span else 0.0
    return {
        "mode": args.mode,
        "dispatchers": args.dispatchers,
        "duration_s": args.duration,
        "tps_limit": args.tps_limit,
        "invokes": len(arrivals),
        "invoked_outcomes": outcomes.get(DispatchOutcome.INVOKED.value, 0),
        "requeued": {k: v for k, v in outcomes.items() if k.startswith("requeued")},
        "max_in_any_1s_window": max_in_any_second(arrivals),
        "achieved_rate": round(rate, 3),
        "achieved_over_limit": round(rate / args.tps_limit, 4),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=8.0, help="seconds to drain the backlog (60 for a real run)")
    parser.add_argument("--dispatchers", type=int, default=8, help="concurrent dispatcher instances")
    parser.add_argument(
        "--mode",
        choices=("budget", "full"),
        default="budget",
        help="budget: reserve + wait + invoke (the TPS path); full: the whole dispatch (sessions table, "
        "session budget, result check), which moto on one small machine cannot serve at 25/s",
    )
    parser.add_argument("--tps-limit", type=float, default=25.0, help="invokes per second allowed per endpoint")
    args = parser.parse_args(argv)
    record = results.begin("dispatcher_bench")
    result = run(args)
    print(json.dumps(result, indent=2))
    ok = result["max_in_any_1s_window"] <= result["tps_limit"] and result["achieved_over_limit"] >= 0.95
    record.write(result, targets={"max_in_any_1s_window": "<= tps_limit", "achieved_over_limit": ">= 0.95", "met": ok})
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
