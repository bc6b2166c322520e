"""``rollouts status`` and ``rollouts top``: one snapshot from the sessions index, queues, metrics and alarms."""

from __future__ import annotations

import json
import socket
import statistics
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from trainer_support import alarm_in_state, aws, served

from rollout_contract import DispatchRequest, Status
from rollout_contract import metrics as names
from rollout_contract.budgets import ATTR_TOTAL, SESSION_BUDGET_ID
from rollout_contract.resources import BUDGET_PARTITION_KEY, SESSIONS_PARTITION_KEY, ExperimentResources
from rollout_contract.sessions import ATTR_EXP_ID, ATTR_INFLIGHT, INFLIGHT_MARK
from trainer_client._cli import main
from trainer_client._top import Watch


def _in_flight(descriptor, session_id: str, *, holds: bool = True) -> None:
    """Mark a rollout as holding a session slot (the dispatcher's in-flight mark), or not any more."""
    key = {SESSIONS_PARTITION_KEY: {"S": session_id}}
    dynamodb = aws("dynamodb")
    if holds:
        dynamodb.update_item(
            TableName=descriptor.sessions_table,
            Key=key,
            UpdateExpression="SET #i = :mark, #e = :exp",
            ExpressionAttributeNames={"#i": ATTR_INFLIGHT, "#e": ATTR_EXP_ID},
            ExpressionAttributeValues={":mark": {"S": INFLIGHT_MARK}, ":exp": {"S": descriptor.exp_id}},
        )
    else:
        dynamodb.update_item(
            TableName=descriptor.sessions_table,
            Key=key,
            UpdateExpression="REMOVE #i",
            ExpressionAttributeNames={"#i": ATTR_INFLIGHT},
        )


def _finished(descriptor, session_id: str, status: str) -> None:
    """Mark a rollout finished with ``status`` now, as the finisher does."""
    aws("dynamodb").update_item(
        TableName=descriptor.sessions_table,
        Key={SESSIONS_PARTITION_KEY: {"S": session_id}},
        UpdateExpression="SET #state = :finished, #status = :status, #at = :now REMOVE #i",
        ExpressionAttributeNames={"#state": "state", "#status": "status", "#at": "finished_at", "#i": ATTR_INFLIGHT},
        ExpressionAttributeValues={
            ":finished": {"S": "finished"},
            ":status": {"S": status},
            ":now": {"N": str(time.time())},
        },
    )


def _publish(exp_id: str, name: str, values: list[float], **dimensions: str) -> None:
    """Put data points as the functions' EMF lines reach CloudWatch (two seconds ago: moto reads up to the second)."""
    now = datetime.now(UTC) - timedelta(seconds=2)
    aws("cloudwatch").put_metric_data(
        Namespace=names.NAMESPACE,
        MetricData=[
            {
                "MetricName": name,
                "Dimensions": [
                    {"Name": key, "Value": value} for key, value in {names.EXP_DIMENSION: exp_id, **dimensions}.items()
                ],
                "Timestamp": now,
                "Value": value,
            }
            for value in values
        ],
    )


def test_status_reads_states_budgets_rates_durations_dlqs_and_alarms_without_listing_results(
    descriptor, client, backend, capsys
):
    # GIVEN one rollout running, 12 invokes and 9 completions (one agent_error) in the last minute, the account's
    # session count, and an alarm of the experiment in ALARM
    future = client.invoke({"reward": 1.0}, input_id="q1")
    (request,) = backend.receive(1)
    _in_flight(descriptor, future.session_id)
    _publish(descriptor.exp_id, names.INVOKED, [6, 6])
    _publish(descriptor.exp_id, names.COMPLETED, [8], status=Status.SUCCEEDED.value)
    _publish(descriptor.exp_id, names.COMPLETED, [1], status=Status.AGENT_ERROR.value)
    _publish(descriptor.exp_id, names.DURATION, [float(s) for s in range(1, 101)])
    aws("dynamodb").put_item(
        TableName=descriptor.budget_table, Item={BUDGET_PARTITION_KEY: {"S": SESSION_BUDGET_ID}, ATTR_TOTAL: {"N": "3"}}
    )
    alarm_in_state(descriptor.exp_id, "StuckRollouts", "ALARM")

    # WHEN `rollouts status --json` runs
    assert main(["status", descriptor.exp_id, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)

    # THEN it holds the rollout by state against the budgets, the rates, the percentiles, the DLQs and the alarm
    assert status["in_flight"] == {"running": 1} and status["sessions"] == 1 and status["session_budget"] == 900
    assert status["account_sessions"] == 3
    assert (status["invokes_per_s"], status["tps_limit"]) == (12 / 60, 25.0)
    assert status["completions_per_s"] == 9 / 60
    assert status["completed"] == {"succeeded": 8, "agent_error": 1}
    assert (status["duration_p50_s"], status["duration_p99_s"]) == (50.0, 99.0)
    assert set(status["dead_letters"].values()) == {0}
    assert status["alarms"] == {"StuckRollouts": "ALARM"}
    assert abs(status["at"] - datetime.now(UTC).timestamp()) < 60

    # AND the text view says the same with a timestamp
    assert main(["status", descriptor.exp_id]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{descriptor.exp_id} at ") and " UTC\n" in out
    assert "in flight 1 (1 running)" in out and "sessions    1 of 900 (0%)" in out and "0.20/s of 25/s (1%)" in out
    assert "p50 50.00 s, p99 99.00 s" in out and "StuckRollouts ALARM" in out


def test_status_names_the_latest_failures_from_what_is_stored_whoever_watched(descriptor, client, backend):
    # GIVEN three rollouts in flight: one ends agent_error and the table marks it finished (status, time), one
    # ends cancelled but the table still lists it running (the finisher not there yet), one succeeds
    futures = [
        client.invoke({"end_as": status}, input_id=f"q{i}")
        for i, status in enumerate(("agent_error", "cancelled", "succeeded"))
    ]
    requests = [r for r in backend.receive(3) if isinstance(r, DispatchRequest)]
    for future in futures:
        _in_flight(descriptor, future.session_id)
    for request in requests:
        backend.complete(request)
    _finished(descriptor, requests[0].session_id, "agent_error")
    _in_flight(descriptor, requests[2].session_id, holds=False)
    # WHEN a one-shot view is read (no watch saw them end)
    snapshot = Watch(descriptor).snapshot()
    # THEN both failures are listed with their reasons, newest first, read from the stored results; the one the
    # table still lists is counted ended, not in flight
    assert {(f.session_id, f.status, f.reason) for f in snapshot.latest_failures} == {
        (futures[0].session_id, "agent_error", "boom"),
        (futures[1].session_id, "cancelled", "cancelled"),
    }
    assert snapshot.in_flight == {} and snapshot.ended_unmarked == 1 and snapshot.failures_complete


def test_status_json_gives_the_failures_to_a_script(descriptor, client, backend, capsys):
    future = client.invoke({"end_as": "agent_error"}, input_id="q1")
    (request,) = backend.receive(1)
    backend.complete(request)
    _finished(descriptor, future.session_id, "agent_error")
    assert main(["status", descriptor.exp_id, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["latest_failures"] == [
        {"session_id": future.session_id, "input_id": "q1", "status": "agent_error", "reason": "boom"}
    ]


def _publish_gateway(descriptor, gateway_url: str) -> None:
    """Publish the experiment's descriptor with its token gateway (as ``-c gateway_url`` does)."""
    aws("ssm").put_parameter(
        Name=ExperimentResources.for_experiment(descriptor.exp_id).descriptor_parameter,
        Value=descriptor.model_copy(update={"gateway_url": gateway_url}).model_dump_json(),
        Type="String",
        Overwrite=True,
    )


@pytest.mark.processes
def test_top_shows_how_many_steps_behind_the_trainers_weights_the_served_tokens_were_sampled(descriptor, capsys):
    from rllm_model_gateway import GatewayConfig

    from local_stack.model_endpoint import EndpointSettings, create_app
    from trainer_client import TokenTrace
    from trainer_client.gateway import WEIGHT_VERSION_PATH, create_settled_app

    body = {"model": "stand-in", "messages": [{"role": "user", "content": "What is 12 + 30?"}]}
    with served(create_app(EndpointSettings())) as model:
        config = GatewayConfig(workers=[{"url": f"{model}/v1"}], store_worker="memory", sync_traces=True)
        with served(create_settled_app(config)) as gateway:
            _publish_gateway(descriptor, gateway)
            session = str(uuid.uuid4())
            call = f"{gateway}/sessions/{session}/v1/chat/completions"
            # GIVEN a call before the trainer told any version, two at version 3 and one after the push to 5
            httpx.post(call, json=body, timeout=30).raise_for_status()
            for version, calls in ((3, 2), (5, 1)):
                httpx.post(f"{gateway}{WEIGHT_VERSION_PATH}", json={"weight_version": version}, timeout=10)
                for _ in range(calls):
                    httpx.post(call, json=body, timeout=30).raise_for_status()
            traces = [TokenTrace.model_validate(t) for t in httpx.get(f"{gateway}/sessions/{session}/traces").json()]
            lags = [5 - t.weight_version for t in traces if t.weight_version for _ in t.completion_token_ids]
            # WHEN `rollouts top --once --json` reads one refresh
            assert main(["top", descriptor.exp_id, "--once", "--json"]) == 0
            staleness = json.loads(capsys.readouterr().out)["staleness"]
            # THEN it shows every served token's lag behind version 5: the median token's and the largest
            assert staleness == {
                "weight_version": 5,
                "p50": statistics.median(lags),
                "max": 2,
                "tokens": len(lags),
                "unversioned_tokens": len(traces[0].completion_token_ids),
                "window_s": 300,
                "error": None,
            }
            # AND the text view says the same
            assert main(["top", descriptor.exp_id, "--once"]) == 0
            assert (
                f"staleness   p50 {statistics.median(lags):g}, max 2 steps behind weight version 5 "
                f"({len(lags)} tokens served in the last 5 min; {len(traces[0].completion_token_ids)} with no version)"
            ) in capsys.readouterr().out


def test_top_says_when_the_gateway_cannot_be_read_and_shows_the_rest(descriptor, capsys):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    _publish_gateway(descriptor, closed)
    assert main(["top", descriptor.exp_id, "--once"]) == 0
    out = capsys.readouterr().out
    assert "staleness   the token gateway could not be read (ConnectError" in out and "dead letters" in out


def test_top_reads_a_stored_result_once_and_then_lists_only_what_may_still_run(descriptor, client, backend):
    # GIVEN two rollouts the table lists as running, one of which stored its result (the finisher not there yet)
    futures = [client.invoke({"end_as": "succeeded"}, input_id=f"q{i}") for i in range(2)]
    requests = [r for r in backend.receive(2) if isinstance(r, DispatchRequest)]
    for future in futures:
        _in_flight(descriptor, future.session_id)
    backend.complete(requests[0])
    watch = Watch(descriptor)
    calls: Counter[str] = Counter()
    watch._clients["s3"].meta.events.register("before-call.s3", lambda model, **_: calls.update([model.name]))
    # WHEN top refreshes three times
    snapshots = [watch.snapshot()]
    first = Counter(calls)
    snapshots += [watch.snapshot(), watch.snapshot()]
    # THEN every refresh shows the stored one ended and the other running
    assert all(s.ended_unmarked == 1 and s.in_flight == {"running": 1} for s in snapshots)
    # AND the first listed both input ids in one page of the experiment's prefix and read the result; each later one
    # lists only the input id still running and reads nothing (was: two lists and a read at every refresh)
    assert first == Counter({"ListObjectsV2": 1, "GetObject": 1})
    assert calls - first == Counter({"ListObjectsV2": 2})
