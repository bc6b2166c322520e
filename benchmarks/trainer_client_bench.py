"""Benchmark the trainer client's completion path: 10,000 rollouts in flight, completed by synthetic events.

The SQS and S3 clients are in-memory fakes (the client's ``clients=`` seam), so the numbers are the
client's own cost: parsing the EventBridge event, the O(1) lookup, reading and validating the result,
resolving the future, batched deletes. Measured:

- memory per in-flight future (tracemalloc, over submitting ``--rollouts`` rollouts),
- CPU time per completion (process time while the events are consumed),
- latency from an event entering the queue to its future resolving (p50 / p99), with events arriving
  at ``--rate`` per second.

Run: ``.venv/bin/python benchmarks/trainer_client_bench.py [--rollouts 10000] [--rate 2000]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
import tracemalloc
from collections import deque
from typing import Any

import _results as results

from rollout_contract import DispatchRequest, RolloutResult, Timings, parse_dispatch_message
from trainer_client import AwsClients, PollSettings, RolloutClient

EXP_ID = "bench"
BUCKET = "bench-results"


class FakeSqs:
    """Two queues in memory: the dispatch queue records sends, the completion queue serves events."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.events: deque[tuple[str, str]] = deque()
        self.pushed_at: dict[str, float] = {}
        self.cond = threading.Condition()
        self.deleted = 0
        self.handed_back = 0

    def get_queue_url(self, QueueName: str) -> dict[str, str]:
        return {"QueueUrl": QueueName}

    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, str]]) -> dict[str, Any]:
        self.sent.extend(entry["MessageBody"] for entry in Entries)
        return {"Successful": [{"Id": entry["Id"]} for entry in Entries], "Failed": []}

    def push(self, session_id: str, body: str) -> None:
        with self.cond:
            self.pushed_at[session_id] = time.perf_counter()
            self.events.append((session_id, body))
            self.cond.notify()

    def receive_message(
        self, QueueUrl: str, MaxNumberOfMessages: int, WaitTimeSeconds: int, **_attributes: Any
    ) -> dict[str, Any]:
        with self.cond:
            self.cond.wait_for(lambda: self.events, timeout=WaitTimeSeconds)
            batch = [self.events.popleft() for _ in range(min(MaxNumberOfMessages, len(self.events)))]
        return {"Messages": [{"Body": body, "ReceiptHandle": sid} for sid, body in batch]}

    def delete_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        self.deleted += len(Entries)
        return {"Successful": Entries, "Failed": []}

    def change_message_visibility_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        self.handed_back += len(Entries)
        return {"Successful": Entries, "Failed": []}


class _Body:
    def __init__(self, data: bytes) -> None:
        self._data = data

    def read(self) -> bytes:
        return self._data


class FakeS3:
    """Result objects in a dict."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def get_object(self, Bucket: str, Key: str) -> dict[str, Any]:
        return {"Body": _Body(self.objects[Key])}


def event_body(key: str) -> str:
    """An EventBridge S3 "Object Created" event as AWS delivers it to SQS."""
    return json.dumps(
        {
            "version": "0",
            "id": "e",
            "detail-type": "Object Created",
            "source": "aws.s3",
            "account": "1",
            "time": "2026-01-01T00:00:00Z",
            "region": "us-east-1",
            "resources": [f"arn:aws:s3:::{BUCKET}"],
            "detail": {
                "version": "0",
                "bucket": {"name": BUCKET},
                "object": {"key": key, "size": 400, "etag": "x"},
                "reason": "PutObject",
            },
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=2000.0, help="synthetic events per second")
    args = parser.parse_args()
    record = results.begin("trainer_client_bench")

    sqs, s3 = FakeSqs(), FakeS3()
    client = RolloutClient(
        "arn:aws:bedrock-agentcore:us-east-1:1:runtime/bench",
        BUCKET,
        EXP_ID,
        clients=AwsClients(sqs=sqs, s3=s3),
        poll=PollSettings(wait_time_s=1),
    )

    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    futures = client.submit([({"prompt": f"q{i}"}, f"p{i % 1000}") for i in range(args.rollouts)], timeout=3600)
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    in_flight_bytes = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    fake_queue_bytes = sum(sys.getsizeof(body) for body in sqs.sent) + sys.getsizeof(sqs.sent)
    per_future = (in_flight_bytes - fake_queue_bytes) / args.rollouts

    requests = [parse_dispatch_message(body) for body in sqs.sent]
    for request in requests:
        assert isinstance(request, DispatchRequest)
        now = time.time()
        result = RolloutResult.from_handler_output(
            {"rewards": [1.0], "answer": "42"},
            key=request.key,
            s3_bucket=BUCKET,
            payload=request.payload,
            timings=Timings(submitted_at=request.submitted_at, started_at=now, finished_at=now),
        )
        s3.objects[result.result_key] = result.to_json_bytes()
    bodies = [(request.session_id, event_body(str(request.key))) for request in requests]

    resolved_at: dict[str, float] = {}
    for future in futures:
        future.add_done_callback(lambda f: resolved_at.__setitem__(f.session_id, time.perf_counter()))

    cpu_start, wall_start = time.process_time(), time.perf_counter()
    interval = 1.0 / args.rate
    for n, (session_id, body) in enumerate(bodies):
        sqs.push(session_id, body)
        lag = wall_start + (n + 1) * interval - time.perf_counter()
        if lag > 0:
            time.sleep(lag)
    for future in futures:
        future.result(timeout=60)
    cpu = time.process_time() - cpu_start
    wall = time.perf_counter() - wall_start
    client.close()

    latencies = sorted(resolved_at[sid] - sqs.pushed_at[sid] for sid, _ in bodies)
    assert sqs.deleted == args.rollouts and sqs.handed_back == 0
    p50_ms, p99_ms = statistics.median(latencies) * 1e3, latencies[int(0.99 * len(latencies))] * 1e3
    print(f"rollouts in flight:            {args.rollouts}")
    print(f"memory per in-flight future:   {per_future / 1024:.2f} KiB (tracemalloc over submit, minus the fake queue)")
    print(
        f"CPU per completion:            {cpu / args.rollouts * 1e6:.0f} us (process time, all threads, incl. "
        "the synthetic producer)"
    )
    print(f"events offered:                {args.rate:.0f}/s; completed {args.rollouts / wall:.0f}/s over {wall:.1f} s")
    print(f"event queued -> resolved:      p50 {p50_ms:.2f} ms, p99 {p99_ms:.2f} ms")
    record.write(
        {
            "rollouts_in_flight": args.rollouts,
            "memory_kib_per_future": round(per_future / 1024, 2),
            "cpu_us_per_completion": round(cpu / args.rollouts * 1e6),
            "events_offered_per_s": args.rate,
            "completed_per_s": round(args.rollouts / wall),
            "event_to_resolved_ms": {"p50": round(p50_ms, 2), "p99": round(p99_ms, 2)},
        }
    )


if __name__ == "__main__":
    main()
