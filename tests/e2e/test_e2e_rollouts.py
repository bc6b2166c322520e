"""Every terminal status, duplicates, several trainers and a restart, on the real local stack.

Each test drives the whole path: trainer -> dispatch queue -> dispatcher (worker process) -> ACR emulator
-> scripted agent process -> S3 -> EventBridge -> completion and finisher queues -> trainer and finisher.
"""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import CancelledError
from pathlib import Path

import boto3
import pytest
from e2e_support import (
    EMULATOR_MAX_PAYLOAD,
    EXP,
    browse,
    connect,
    emulator_counters,
    headless_browser,
    run_trainer_process,
    wait_until,
)

from local_stack.stack import LocalStack
from rollout_contract import ResultKey, RolloutResult, Status
from rollout_contract.budgets import ATTR_TOTAL, SESSION_BUDGET_ID, held_attribute
from rollout_contract.monitoring import dashboard
from rollout_contract.resources import BUDGET_PARTITION_KEY, BUDGET_TABLE, ExperimentResources
from trainer_client import PollSettings, RolloutClient
from trainer_client._cli import main
from trainer_client._dashboard import monitored

pytestmark = pytest.mark.e2e

RESULT_WAIT_S = 60


def _stored(stack: LocalStack, key: str) -> RolloutResult:
    s3 = boto3.client("s3")
    body = s3.get_object(Bucket=stack.descriptors[EXP].results_bucket, Key=key)["Body"].read()
    return RolloutResult.from_json_bytes(body)


def _slots_held(exp_id: str = EXP) -> tuple[int, int]:
    """(account-wide total, this experiment's count) of session slots in the budget table."""
    item = boto3.client("dynamodb").get_item(
        TableName=BUDGET_TABLE.name, Key={BUDGET_PARTITION_KEY: {"S": SESSION_BUDGET_ID}}, ConsistentRead=True
    )["Item"]
    return int(item[ATTR_TOTAL]["N"]), int(item.get(held_attribute(exp_id), {"N": "0"})["N"])


def test_a_succeeding_agent_resolves_its_future_with_reward_and_frees_its_slot(
    stack: LocalStack, client: RolloutClient
) -> None:
    # GIVEN an agent that succeeds with reward 0.5
    # WHEN the trainer invokes it
    future = client.invoke({"action": "succeed", "reward": 0.5}, input_id="happy", timeout=60)
    result = future.result(timeout=RESULT_WAIT_S)
    # THEN the future holds the agent's result, and the finisher stops the session and frees the slot
    assert result.status is Status.SUCCEEDED and result.reward == 0.5
    assert result.timings.dispatched_at is not None and result.timings.finished_at is not None
    assert wait_until(lambda: _slots_held() == (0, 0))


def test_an_agent_exception_ends_as_agent_error_with_its_traceback(client: RolloutClient) -> None:
    # GIVEN an agent that raises
    # WHEN the trainer invokes it
    result = client.invoke({"action": "raise"}, input_id="raises", timeout=60).result(timeout=RESULT_WAIT_S)
    # THEN the result says agent_error with the exception and where it came from
    assert result.status is Status.AGENT_ERROR and result.reward is None
    assert result.error.type == "RuntimeError" and "scripted failure" in result.error.traceback


def test_an_agent_that_crashes_ends_as_timed_out_at_its_deadline(client: RolloutClient) -> None:
    # GIVEN an agent process that dies without writing a result (an OOM-killed microVM)
    # WHEN the trainer invokes it with a 4 s deadline
    started = time.monotonic()
    result = client.invoke({"action": "crash"}, input_id="crashes", timeout=4).result(timeout=RESULT_WAIT_S)
    # THEN the sweeper ends it as timed_out soon after the deadline, not at some client-side timeout
    assert result.status is Status.TIMED_OUT
    assert 4 <= time.monotonic() - started < 4 + 15


def test_cancel_ends_a_running_rollout_as_cancelled_and_stops_its_session(
    stack: LocalStack, client: RolloutClient
) -> None:
    # GIVEN a rollout that is running (its agent sleeps for 60 s)
    stops_before = emulator_counters(stack)["stops"]
    future = client.invoke({"action": "succeed", "sleep_s": 60}, input_id="cancelled", timeout=120)
    assert wait_until(lambda: _slots_held()[1] >= 1)
    # WHEN the trainer cancels it
    assert future.cancel()
    # THEN the future raises CancelledError (as in ART), the stored result says cancelled, the session is
    # stopped and its slot freed; the agent's own result, written later, never replaces it
    with pytest.raises(CancelledError):
        future.result(timeout=1)
    assert wait_until(lambda: emulator_counters(stack)["stops"] > stops_before)
    assert _stored(stack, future.result_key).status is Status.CANCELLED
    assert wait_until(lambda: _slots_held() == (0, 0))


def test_an_operator_lists_the_running_rollouts_and_cancels_them_all(
    stack: LocalStack, client: RolloutClient, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN two rollouts running (their agents sleep for 60 s)
    futures = [client.invoke({"sleep_s": 60}, input_id="operated", timeout=120) for _ in range(2)]
    assert wait_until(lambda: _slots_held()[1] >= 2)
    # WHEN an operator lists the sessions, then cancels every rollout (commands of another process's making)
    assert main(["sessions", EXP, "--json"]) == 0
    listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert main(["cancel", EXP, "--all"]) == 0
    # THEN both were listed with their input id, and both end as cancelled, their sessions stopped, slots freed
    assert {(row["session_id"], row["input_id"]) for row in listed} >= {(f.session_id, "operated") for f in futures}
    assert [future.result(timeout=RESULT_WAIT_S).status for future in futures] == [Status.CANCELLED] * 2
    assert wait_until(lambda: _slots_held() == (0, 0))


def test_top_once_json_shows_a_run_from_the_local_cloudwatch_metrics(
    client: RolloutClient, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN three rollouts ended on the local stack (two succeeded, one agent_error) and one still running
    ended = [client.invoke({"action": a}, input_id="watched", timeout=60) for a in ("succeed", "succeed", "raise")]
    running = client.invoke({"sleep_s": 60}, input_id="watched", timeout=120)
    assert [f.result(timeout=RESULT_WAIT_S).status for f in ended] == [Status.SUCCEEDED] * 2 + [Status.AGENT_ERROR]

    def snapshot() -> dict:
        assert main(["top", EXP, "--once", "--json"]) == 0
        return json.loads(capsys.readouterr().out)

    # WHEN an operator runs `rollouts top --once --json`, until the three completions are in the local metrics
    # (each worker publishes its own every few seconds, so they may arrive in different snapshots)
    views: list[dict] = []

    def all_completions_seen() -> bool:
        views.append(snapshot())
        completed = views[-1]["completed"]
        return completed.get("agent_error", 0) >= 1 and completed.get("succeeded", 0) >= 2

    assert wait_until(all_completions_seen, timeout_s=30), views[-1:]
    view = views[-1]
    # THEN it shows the running rollout against the budgets, the invokes, completions by status and durations
    assert view["in_flight"].get("running", 0) >= 1 and view["session_budget"] and view["tps_limit"]
    assert view["invokes_per_s"] > 0 and view["completions_per_s"] > 0
    assert view["duration_p50_s"] is not None
    assert set(view["dead_letters"].values()) == {0}
    # and the experiment's 8 alarms, which the local stack creates from the CDK app's definitions and evaluates
    assert len(view["alarms"]) == 8 and set(view["alarms"].values()) <= {"OK", "ALARM"}, view["alarms"]
    running.cancel()


def test_a_payload_the_runtime_refuses_ends_as_dispatch_failed(stack: LocalStack, client: RolloutClient) -> None:
    # GIVEN a payload larger than the runtime accepts (it travels to the dispatcher by S3 reference)
    payload = {"action": "succeed", "blob": "x" * (EMULATOR_MAX_PAYLOAD + 1024)}
    # WHEN the trainer invokes it
    result = client.invoke(payload, input_id="too-big", timeout=60).result(timeout=RESULT_WAIT_S)
    # THEN the dispatcher's final 400 reaches the trainer as dispatch_failed, and no slot stays taken
    assert result.status is Status.DISPATCH_FAILED
    assert result.error.type == "ValidationException"
    assert wait_until(lambda: _slots_held() == (0, 0))


def test_a_mixed_batch_loses_nothing_and_duplicates_nothing(stack: LocalStack, client: RolloutClient) -> None:
    # GIVEN twelve rollouts, a third failing in the agent
    actions = ["succeed", "succeed", "raise"] * 4
    payloads = [{"action": action, "sleep_s": 0.3} for action in actions]
    input_ids = [f"batch-{i}" for i in range(len(payloads))]
    # WHEN they run as one batch, six at a time
    items = list(client.run_batch(payloads, 6, timeout=60, input_ids=input_ids))
    # THEN every rollout ends exactly once with the status its agent chose, and S3 holds one object each
    assert sorted(item.index for item in items) == list(range(12))
    assert len({item.session_id for item in items}) == 12
    statuses = {item.index: item.result.status for item in items}
    assert statuses == {i: Status.AGENT_ERROR if a == "raise" else Status.SUCCEEDED for i, a in enumerate(actions)}
    bucket = stack.descriptors[EXP].results_bucket
    keys = [
        obj["Key"]
        for input_id in input_ids
        for obj in boto3.client("s3").list_objects_v2(Bucket=bucket, Prefix=f"{EXP}/{input_id}/").get("Contents", [])
    ]
    assert len(keys) == 12


def test_duplicate_result_events_change_nothing(stack: LocalStack, client: RolloutClient) -> None:
    # GIVEN a finished rollout whose session was stopped and slot freed
    future = client.invoke({"action": "succeed"}, input_id="dup", timeout=60)
    first = future.result(timeout=RESULT_WAIT_S)
    assert wait_until(lambda: _slots_held() == (0, 0))
    stops_before = emulator_counters(stack)["stops"]
    # WHEN its "Object Created" event arrives again, twice, at the trainer and at the finisher
    descriptor = stack.descriptors[EXP]
    event = {
        "version": "0",
        "id": "17793124-05d4-b198-2fde-7ededc63b103",
        "detail-type": "Object Created",
        "source": "aws.s3",
        "detail": {"bucket": {"name": descriptor.results_bucket}, "object": {"key": future.result_key, "size": 1}},
    }
    sqs = boto3.client("sqs")
    finisher_queue = sqs.get_queue_url(QueueName=ExperimentResources.for_experiment(EXP).finisher_queue.name)
    for queue_url in (descriptor.completion_queue_url, finisher_queue["QueueUrl"]):
        for _ in range(2):
            sqs.send_message(QueueUrl=queue_url, MessageBody=json.dumps(event))
    later = client.invoke({"action": "succeed"}, input_id="after-dup", timeout=60).result(timeout=RESULT_WAIT_S)
    # THEN the trainer keeps its first result, the slot count stays exact, and no second stop is counted
    assert later.ok and future.result() is first
    assert wait_until(lambda: _slots_held() == (0, 0))
    assert wait_until(
        lambda: (
            sqs.get_queue_attributes(
                QueueUrl=finisher_queue["QueueUrl"], AttributeNames=["ApproximateNumberOfMessages"]
            )["Attributes"]["ApproximateNumberOfMessages"]
            == "0"
        )
    )
    assert emulator_counters(stack)["stops"] <= stops_before + 1  # the later rollout's own stop


def test_two_trainer_processes_each_get_exactly_their_own_results(stack: LocalStack, client: RolloutClient) -> None:
    # GIVEN another trainer process submitting six rollouts to the same experiment
    # WHEN this process submits six of its own at the same time
    mine = client.submit([({"action": "succeed", "sleep_s": 0.5}, f"proc-a-{i}") for i in range(6)], timeout=60)
    other = run_trainer_process(stack, EXP, "proc-b", "6")
    # THEN each process got all of its own results and none of the other's
    assert other.returncode == 0, other.stderr[-2000:]
    theirs = [json.loads(line) for line in other.stdout.splitlines()]
    assert sorted(r["input_id"] for r in theirs) == [f"proc-b-{i}" for i in range(6)]
    assert all(r["status"] == "succeeded" for r in theirs)
    results = [future.result(timeout=RESULT_WAIT_S) for future in mine]
    assert sorted(r.input_id for r in results) == [f"proc-a-{i}" for i in range(6)]


def test_two_runs_of_one_experiment_run_at_once_under_their_own_prefixes(stack: LocalStack) -> None:
    # GIVEN two runs of the deployed experiment, started without any deploy or provisioning
    with (
        RolloutClient.for_experiment(EXP, run="sweep/lr-1", poll=PollSettings(wait_time_s=1)) as first,
        RolloutClient.for_experiment(EXP, run="sweep/lr-2", poll=PollSettings(wait_time_s=1)) as second,
    ):
        # WHEN both submit at once through the experiment's one dispatch queue
        futures = [
            *first.submit([({"action": "succeed", "reward": 1.0}, f"q{i}") for i in range(3)], timeout=60),
            *second.submit([({"action": "succeed", "reward": 0.0}, f"q{i}") for i in range(3)], timeout=60),
        ]
        results = [future.result(timeout=RESULT_WAIT_S) for future in futures]

        # THEN every rollout succeeded under its run's prefix, and each run sees only its own results
        assert [r.result_key.rsplit("/", 2)[0] for r in results] == [f"{EXP}/sweep/lr-1"] * 3 + [
            f"{EXP}/sweep/lr-2"
        ] * 3
        assert all(r.status is Status.SUCCEEDED for r in results)
        assert sorted(r.reward for r in second.results()) == [0.0] * 3
        # AND the experiment's finisher stopped every session and freed every slot (budgets are the experiment's)
        assert wait_until(lambda: _slots_held() == (0, 0))
        assert first.status().rollouts_in_flight == 0


def test_a_restarted_trainer_collects_what_its_predecessor_submitted(stack: LocalStack, tmp_path: Path) -> None:
    # GIVEN a trainer process that submitted four rollouts with a journal and exited without waiting
    journal = tmp_path / "journal.jsonl"
    submitted = run_trainer_process(stack, EXP, "resume", "4", "--sleep", "2", "--journal", str(journal), "--no-wait")
    assert submitted.returncode == 0, submitted.stderr[-2000:]
    time.sleep(3)  # some finish before the new process starts, some after
    # WHEN a new process attaches the journal
    with connect(stack) as restarted:
        futures = restarted.attach_journal(journal)
        results = [future.result(timeout=RESULT_WAIT_S) for future in futures]
    # THEN it gets every result, each once
    assert sorted(r.input_id for r in results) == [f"resume-{i}" for i in range(4)]
    assert all(r.ok for r in results)
    assert len({ResultKey(r.exp_id, r.input_id, r.session_id) for r in results}) == 4


def test_the_dashboard_page_draws_every_graph_of_the_cdk_definition_in_a_headless_browser(
    stack: LocalStack, tmp_path: Path
) -> None:
    browser = headless_browser()
    # GIVEN a run 'dash' on the stack: two rollouts succeed with rewards, one raises
    with RolloutClient.for_experiment(EXP, run="dash", poll=PollSettings(wait_time_s=1)) as run:
        futures = [run.invoke({"action": a, "reward": 0.5}, input_id="d", timeout=60) for a in ("succeed",) * 2]
        futures.append(run.invoke({"action": "raise"}, input_id="d", timeout=60))
        assert [f.result(timeout=RESULT_WAIT_S).status for f in futures][-1] is Status.AGENT_ERROR
    # WHEN an operator serves the dashboard (the command, in its own process) and a browser loads the page
    rollouts = Path(sys.executable).with_name("rollouts")
    with subprocess.Popen(
        [str(rollouts), "dashboard", EXP, "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **stack.env},
    ) as server:
        try:
            url = server.stdout.readline().split(" at ")[1].split()[0]  # type: ignore[union-attr]
            pages: list[dict[str, tuple[str, int, int]]] = []

            def every_graph_drew_lines() -> bool:
                dom = browse(browser, url, "--dump-dom")
                found = _WIDGET.findall(dom)
                pages.append({html.unescape(t): (kind, int(lines), int(drawn)) for t, kind, lines, drawn in found})
                return bool(pages[-1]) and all(drawn for kind, _, drawn in pages[-1].values() if kind == "graph")

            # (the functions, the emulator and the moto server publish every 5 s; the sweeper's gauge every second)
            drew = wait_until(every_graph_drew_lines, timeout_s=60)
            screenshot = tmp_path / "dashboard.png"
            browse(browser, url, f"--screenshot={screenshot}", "--window-size=1500,2000", "--hide-scrollbars")
        finally:
            server.terminate()
    print(f"dashboard screenshot: {screenshot}")
    # THEN the page has every widget of the definition the CDK dashboard renders, in its order, and every graph
    # drew at least one line from the local CloudWatch
    definition = dashboard(monitored(stack.descriptors[EXP]))
    assert list(pages[-1]) == [widget.title for row in definition.rows for widget in row]
    assert drew, {title: drawn for title, (kind, _, drawn) in pages[-1].items() if kind == "graph" and not drawn}
    # AND every line a SEARCH found (a metric with data) has points: this run's, and those of earlier tests' runs
    for per_run in ("Completed by run and status", "Reward mean by run"):
        _, lines, drawn = pages[-1][per_run]
        assert lines == drawn >= 1, (per_run, lines, drawn)
    assert screenshot.stat().st_size > 10_000


#: A widget's element on the dashboard page: its title, kind, number of lines and number of lines with points.
_WIDGET = re.compile(r'data-title="([^"]*)" data-kind="(\w+)" data-series="(\d+)" data-drawn="(\d+)"')
