"""Soak the local stack under a seeded fault schedule and account for every submitted rollout.

A real local stack (moto server, ACR emulator, supervised Lambda workers) runs ``--rollouts`` rollouts
(default 5,000; ``--quick``: 300) of the scripted agent (``tests/e2e/agents/scripted_agent.py``: mostly
successes of 0.05-0.5 s, every 20th raises, every 50th crashes its process). The trainer is a separate
process (this file with ``--trainer``) that submits with a journal, keeps at most ``--concurrency`` in
flight and appends each result it receives to ``results.jsonl``. While it runs, the schedule fires, each
fault once unless said otherwise, at seeded points of progress:

- ``trainer_killed_mid_submit``: the trainer is SIGKILLed after it journaled a batch and before it sent
  it (the run holds it there with a hook around the client's send), then restarted with ``--resume``:
  it attaches its journal, which resends what it cannot prove was sent;
- ``trainer_killed_mid_collect``: SIGKILLed once everything is submitted, while it waits for results;
  restarted the same way;
- ``worker_killed:<name>``: every Lambda worker process (both dispatchers, the finisher, the sweeper) SIGKILLed;
  the supervisor replaces it;
- ``agents_killed``: running agent sessions killed through the emulator (twice);
- ``throttle_storm``: the runtime's invoke rate lowered to 1/s for 15 s;
- ``poison_messages``: bodies no consumer can use on the dispatch, completion and finisher queues (twice);
- ``duplicate_events``: copies of stored results' "Object Created" events on the completion and finisher
  queues, and copies of journaled start requests on the dispatch queue (twice).

At the end every session id in the journal is accounted for: ``terminal_at_trainer`` is how many have a
result line in ``results.jsonl``, ``lost`` how many do not, ``duplicated`` how many have more than one
result line or more than one stored result object. One JSON line is printed: ``submitted``,
``terminal_at_trainer``, ``lost``, ``duplicated``, ``by_status``, ``time_to_last_s`` (first submit to
last result), ``wall_s`` (including the stack's start), ``faults_fired`` (and ``gave_up_after_s`` when
``--max-wait-s`` ran out first: the rollouts without a result were then still running). The exit status
is 0 only if ``lost == 0 and duplicated == 0``.

Run: ``.venv/bin/python benchmarks/soak_bench.py [--quick] [--rollouts 5000] [--seed 7] [--concurrency 48]``.
Logs, journal and results under ``.local-stack/soak/``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _results as results
import boto3
import httpx

import agentcore_rollouts_local  # noqa: F401  (puts local_stack, lambdas, examples on sys.path: D80)
from local_stack.stack import PROJECT_ROOT, LocalStack, StackSettings
from rollout_contract import ExperimentResources, parse_result_key
from rollout_contract.events import OBJECT_CREATED, S3_SOURCE
from trainer_client import PollSettings, RolloutClient, RolloutFuture
from trainer_client._journal import read_journal_entries

EXP_ID = "soak"
SCRIPTED_AGENT = PROJECT_ROOT / "tests" / "e2e" / "agents" / "scripted_agent.py"
AGENT_PRELOAD = ("agent_app.preload",)
ROLLOUT_TIMEOUT_S = 20.0
#: The trainer holds a send this long when told to pause in it (the run kills it meanwhile).
PAUSE_IN_SUBMIT_S = 60.0
PAUSED_MARKER = "paused-in-submit"


# The trainer process


def payload(index: int, rng: random.Random) -> dict[str, Any]:
    """The scripted agent's payload for rollout ``index``: mostly short successes, some errors and crashes."""
    if index % 50 == 49:
        return {"action": "crash", "sleep_s": 0.05}
    if index % 20 == 19:
        return {"action": "raise", "sleep_s": 0.05}
    return {"action": "succeed", "sleep_s": round(rng.uniform(0.05, 0.5), 3), "reward": index % 2}


class ResultLog:
    """``results.jsonl``: one line per result this and earlier trainer processes received."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.done = {json.loads(line)["session_id"] for line in _lines(path)}
        self._lock = threading.Lock()
        self._file = path.open("a", encoding="utf-8")

    def record(self, future: RolloutFuture) -> None:
        """Append the result of a resolved future (a local error counts as no result: not recorded)."""
        if future.cancelled() or future.exception() is not None:
            if not future.cancelled():
                print(f"trainer: no result for {future.session_id}: {future.exception()!r}", file=sys.stderr)
            return
        result = future.result()
        error_type = result.error.type if result.error else None
        line = {"session_id": result.session_id, "input_id": result.input_id, "status": result.status.value}
        with self._lock:
            if result.session_id in self.done:
                return
            self.done.add(result.session_id)
            self._file.write(json.dumps({**line, "error_type": error_type, "at": time.time()}) + "\n")
            self._file.flush()


def run_trainer(args: argparse.Namespace) -> int:
    """Submit ``--rollouts`` rollouts with a journal (resuming it if asked) and record every result."""
    work = Path(args.work_dir)
    journal, log = work / "journal.jsonl", ResultLog(work / "results.jsonl")
    rng = random.Random(args.seed)
    with RolloutClient.for_experiment(EXP_ID, poll=PollSettings(wait_time_s=2)) as client:
        submitted = 0
        if args.resume and journal.exists():
            futures = client.attach_journal(journal)
            submitted = len(futures)
            for future in futures:
                future.add_done_callback(log.record)
            print(f"trainer: resumed {submitted} rollouts from the journal", file=sys.stderr)
        if args.pause_in_submit_at is not None:
            _pause_sends_after(client, args.pause_in_submit_at, work / PAUSED_MARKER)
        indexed = [payload(i, rng) for i in range(args.rollouts)]
        while submitted < args.rollouts:
            free = args.concurrency - client.pending_count
            if free <= 0:
                time.sleep(0.05)
                continue
            batch = range(submitted, min(args.rollouts, submitted + min(free, 10)))
            items = [(indexed[i], f"soak-{i}") for i in batch]
            for future in client.submit(items, timeout=ROLLOUT_TIMEOUT_S, journal=journal):
                future.add_done_callback(log.record)
            submitted = batch.stop
        while client.pending_count:
            time.sleep(0.2)
    return 0


def _pause_sends_after(client: RolloutClient, count: int, marker: Path) -> None:
    """Fault hook: the send of the batch that passes ``count`` journaled rollouts waits (to be killed in it)."""
    send, sent = client._send, [0]

    def paused_send(requests: Any, futures: Any, *rest: Any) -> None:
        sent[0] += len(requests)
        if sent[0] >= count and not marker.exists():
            marker.write_text(str(os.getpid()))
            time.sleep(PAUSE_IN_SUBMIT_S)
        send(requests, futures, *rest)

    client._send = paused_send  # type: ignore[method-assign]


# The run


@dataclass
class Soak:
    """The stack, the trainer process and what the schedule did."""

    stack: LocalStack
    args: argparse.Namespace
    work: Path
    faults: Counter[str] = field(default_factory=Counter)
    trainer: subprocess.Popen[bytes] | None = None
    rng: random.Random = field(default_factory=random.Random)

    def start_trainer(self, *, resume: bool, pause_at: int | None = None) -> None:
        argv = [sys.executable, __file__, "--trainer", "--work-dir", str(self.work)]
        argv += ["--rollouts", str(self.args.rollouts), "--concurrency", str(self.args.concurrency)]
        argv += ["--seed", str(self.args.seed), *(["--resume"] if resume else [])]
        argv += ["--pause-in-submit-at", str(pause_at)] if pause_at is not None else []
        log = (self.work / "trainer.log").open("ab")
        self.trainer = subprocess.Popen(argv, env={**os.environ, **self.stack.env}, stdout=log, stderr=log)  # noqa: S603

    def kill_trainer(self, fault: str) -> None:
        assert self.trainer is not None
        self.trainer.send_signal(signal.SIGKILL)
        self.trainer.wait()
        self.faults[fault] += 1
        self.start_trainer(resume=True)

    def results(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in _lines(self.work / "results.jsonl")]

    def journaled(self) -> int:
        path = self.work / "journal.jsonl"
        return len(read_journal_entries(path)) if path.exists() else 0

    # Faults

    def kill_worker(self, name: str) -> None:
        pid = int(self.stack.worker_pid_file(name).read_text())
        os.kill(pid, signal.SIGKILL)
        self.faults[f"worker_killed:{name}"] += 1

    def kill_agents(self, count: int = 3) -> None:
        sessions = httpx.get(f"{self.stack.emulator_url}/_admin/sessions", timeout=10).json()["sessions"]
        ids = [s["session_id"] for s in sessions if s["state"] == "active"]
        for session_id in self.rng.sample(ids, min(count, len(ids))):
            httpx.post(f"{self.stack.emulator_url}/_admin/sessions/{session_id}/kill", timeout=10)
            self.faults["agents_killed"] += 1

    def throttle_storm(self) -> None:
        httpx.post(f"{self.stack.emulator_url}/_admin/throttle", json={"invoke_tps": 1, "seconds": 15}, timeout=10)
        self.faults["throttle_storm"] += 1

    def poison(self) -> None:
        sqs, resources = boto3.client("sqs"), ExperimentResources.for_experiment(EXP_ID)
        descriptor = self.stack.descriptors[EXP_ID]
        bodies = ["not json at all", json.dumps({"kind": "start", "exp_id": EXP_ID}), "[]", json.dumps({"x": 1})]
        finisher_url = sqs.get_queue_url(QueueName=resources.finisher_queue.name)["QueueUrl"]
        for url in (descriptor.dispatch_queue_url, descriptor.completion_queue_url, finisher_url):
            for body in bodies:
                sqs.send_message(QueueUrl=url, MessageBody=body)
        self.faults["poison_messages"] += 1

    def duplicate_events(self, count: int = 10) -> None:
        sqs, resources = boto3.client("sqs"), ExperimentResources.for_experiment(EXP_ID)
        descriptor = self.stack.descriptors[EXP_ID]
        finisher_url = sqs.get_queue_url(QueueName=resources.finisher_queue.name)["QueueUrl"]
        done = self.results()
        for line in self.rng.sample(done, min(count, len(done))):
            key = f"{EXP_ID}/{line['input_id']}/{line['session_id']}.json"
            event = {
                "version": "0",
                "source": S3_SOURCE,
                "detail-type": OBJECT_CREATED,
                "detail": {"bucket": {"name": descriptor.results_bucket}, "object": {"key": key}},
            }
            for url in (descriptor.completion_queue_url, finisher_url):
                sqs.send_message(QueueUrl=url, MessageBody=json.dumps(event))
        entries = [e for e in read_journal_entries(self.work / "journal.jsonl") if e.request]
        for entry in self.rng.sample(entries, min(count, len(entries))):
            sqs.send_message(QueueUrl=descriptor.dispatch_queue_url, MessageBody=entry.request or "")
        self.faults["duplicate_events"] += 1


def schedule(soak: Soak) -> list[tuple[float, str, Callable[[], None]]]:
    """The seeded fault schedule: (fraction of rollouts with a result, name, action), in order."""
    rng, names = soak.rng, soak.stack.worker_names()
    jitter = lambda at: round(at + rng.uniform(-0.03, 0.03), 3)  # noqa: E731
    steps = [
        (jitter(0.08), "throttle_storm", soak.throttle_storm),
        (jitter(0.3), "agents_killed", soak.kill_agents),
        (jitter(0.35), "poison_messages", soak.poison),
        (jitter(0.45), "duplicate_events", soak.duplicate_events),
        (jitter(0.62), "agents_killed", soak.kill_agents),
        (jitter(0.8), "duplicate_events", soak.duplicate_events),
        (jitter(0.85), "poison_messages", soak.poison),
    ]
    for index, name in enumerate(names):
        at = jitter(0.2 + 0.15 * index)
        steps.append((at, f"worker_killed:{name}", lambda name=name: soak.kill_worker(name)))
    return sorted(steps, key=lambda step: step[0])


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start the stack, run the trainer under the schedule, and account for every submitted rollout."""
    run_dir = Path(args.run_dir).resolve()
    work = run_dir / "work"
    work.mkdir(parents=True, exist_ok=True)
    for stale in work.iterdir():
        stale.unlink()
    started = time.monotonic()
    settings = StackSettings(
        run_dir=run_dir,
        experiments=(EXP_ID,),
        agent_command=(sys.executable, str(SCRIPTED_AGENT)),
        gateway=False,
        sweep_interval_s=2.0,
        runtime_options={"preload": AGENT_PRELOAD},
    )
    with LocalStack(settings) as stack:
        for name, value in stack.env.items():
            os.environ[name] = value
        soak = Soak(stack, args, work, rng=random.Random(args.seed))
        try:
            return _soak(soak, stack, args, work, started)
        finally:
            if soak.trainer is not None and soak.trainer.poll() is None:
                soak.trainer.kill()
                soak.trainer.wait()


def _soak(soak: Soak, stack: LocalStack, args: argparse.Namespace, work: Path, started: float) -> dict[str, Any]:
    """Run the trainer under the schedule until every rollout has a result (or time runs out); report."""
    steps = schedule(soak)
    first_submit = time.time()
    soak.start_trainer(resume=False, pause_at=int(args.rollouts * soak.rng.uniform(0.15, 0.25)))
    mid_collect_done = False
    limit = time.monotonic() + args.max_wait_s
    complete = False
    while time.monotonic() < limit:
        trainer = soak.trainer
        assert trainer is not None
        if (work / PAUSED_MARKER).exists() and not soak.faults["trainer_killed_mid_submit"]:
            soak.kill_trainer("trainer_killed_mid_submit")
        fraction = len(soak.results()) / args.rollouts
        while steps and fraction >= steps[0][0]:
            _, name, action = steps.pop(0)
            try:
                action()
            except Exception as exc:  # noqa: BLE001 - a fault that cannot fire is reported, not fatal
                print(f"soak: fault {name} could not fire: {exc!r}", file=sys.stderr)
        if not mid_collect_done and soak.journaled() >= args.rollouts and fraction >= 0.7:
            soak.kill_trainer("trainer_killed_mid_collect")
            mid_collect_done = True
        if trainer.poll() is not None and soak.trainer is trainer:
            if trainer.returncode == 0 and not steps and mid_collect_done:
                complete = True
                break
            if trainer.returncode != 0:
                print(f"soak: trainer exited {trainer.returncode}; resuming it", file=sys.stderr)
            soak.start_trainer(resume=True)
        time.sleep(0.5)
    stored = _stored_result_counts(stack)
    report = account(work, stored, first_submit)
    report["faults_fired"] = dict(sorted(soak.faults.items()))
    if not complete:
        report["gave_up_after_s"] = args.max_wait_s  # the rest was still running: not a loss measurement
    report["wall_s"] = round(time.monotonic() - started, 1)
    return report


def _stored_result_counts(stack: LocalStack) -> Counter[str]:
    """How many result objects each session id has in the results bucket."""
    s3 = boto3.client("s3")
    counts: Counter[str] = Counter()
    paginator = s3.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=stack.descriptors[EXP_ID].results_bucket, Prefix=f"{EXP_ID}/"):
        for obj in page.get("Contents", []):
            counts[parse_result_key(obj["Key"]).session_id] += 1
    return counts


def account(work: Path, stored: Counter[str], first_submit: float) -> dict[str, Any]:
    """Every journaled session id: did the trainer record exactly one result for it?"""
    submitted = {entry.key.session_id for entry in read_journal_entries(work / "journal.jsonl")}
    lines = [json.loads(line) for line in _lines(work / "results.jsonl")]
    per_session = Counter(line["session_id"] for line in lines)
    status = {line["session_id"]: line["status"] for line in lines}
    terminal = submitted & per_session.keys()
    duplicated = {sid for sid, n in per_session.items() if n > 1} | {sid for sid, n in stored.items() if n > 1}
    last = max((line["at"] for line in lines), default=first_submit)
    return {
        "submitted": len(submitted),
        "terminal_at_trainer": len(terminal),
        "lost": len(submitted - terminal),
        "duplicated": len(duplicated),
        "by_status": dict(sorted(Counter(status[sid] for sid in terminal).items())),
        "time_to_last_s": round(last - first_submit, 1),
    }


def _lines(path: Path) -> list[str]:
    try:
        return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except FileNotFoundError:
        return []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=5000, help="rollouts to submit (5000)")
    parser.add_argument("--quick", action="store_true", help="300 rollouts")
    parser.add_argument("--seed", type=int, default=7, help="seed of the fault schedule and payloads (7)")
    parser.add_argument("--concurrency", type=int, default=48, help="rollouts in flight at most (48)")
    parser.add_argument("--run-dir", default=".local-stack/soak", help="logs, journal and results")
    parser.add_argument("--max-wait-s", type=float, help="give up after this long (default: 1 s per rollout + 900)")
    parser.add_argument("--trainer", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--resume", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--work-dir", help=argparse.SUPPRESS)
    parser.add_argument("--pause-in-submit-at", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.rollouts = 300
    if args.trainer:
        return run_trainer(args)
    if args.max_wait_s is None:
        args.max_wait_s = args.rollouts + 900.0
    # Stop the stack and the trainer on SIGTERM, and on Ctrl-C even when started in the background.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    record = results.begin("soak_bench-quick" if args.quick else "soak_bench")
    report = run(args)
    print(json.dumps(report))
    ok = report["lost"] == 0 and report["duplicated"] == 0
    record.write(report, targets={"lost": 0, "duplicated": 0, "met": ok})
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
