"""``rollouts sessions`` and ``rollouts cancel``: rollouts in flight, read from the sessions table; cancelling."""

from __future__ import annotations

import json
import threading
import time

import pytest
from trainer_support import BUCKET, aws, put_result

from rollout_contract import ResultKey, RolloutResult, Status, Timings
from rollout_contract.sandbox import new_sandbox_session_id
from rollout_contract.sessions import (
    ATTR_DEADLINE_AT,
    ATTR_EXP_ID,
    ATTR_INFLIGHT,
    ATTR_INPUT_ID,
    ATTR_SESSION_ID,
    ATTR_STATE,
    ATTR_STATUS,
    ATTR_SUBMITTED_AT,
    INFLIGHT_MARK,
    trainer_item_key,
)
from trainer_client._cli import main


def record(descriptor, session_id, state, input_id, *, deadline_in=None, age=7200.0, status=None):
    """Write one sessions-table item as the dispatcher and finisher leave it (times relative to now)."""
    now = time.time()
    item = {
        ATTR_SESSION_ID: {"S": session_id},
        ATTR_STATE: {"S": state},
        ATTR_INPUT_ID: {"S": input_id},
        ATTR_EXP_ID: {"S": descriptor.exp_id},
        ATTR_SUBMITTED_AT: {"N": str(now - age)},
    }
    if deadline_in is not None:
        item.update({ATTR_INFLIGHT: {"S": INFLIGHT_MARK}, ATTR_DEADLINE_AT: {"N": str(now + deadline_in)}})
    if status is not None:
        item[ATTR_STATUS] = {"S": status}
    aws("dynamodb").put_item(TableName=descriptor.sessions_table, Item=item)


def store(descriptor, session_id, input_id, status):
    """Store a rollout's result as its writer does (the sessions table not told yet)."""
    key = ResultKey(descriptor.exp_id, input_id, session_id)
    if status == "succeeded":
        result = RolloutResult.from_handler_output(
            {"rewards": 1.0}, key=key, s3_bucket=BUCKET, payload=None, timings=Timings()
        )
    else:
        result = RolloutResult.terminal(Status(status), key=key, s3_bucket=BUCKET)
    put_result(result)


@pytest.fixture
def rollouts(descriptor):
    """Two running rollouts of group g1, one admitted of g2, one queued of g1, one finished, and a trainer's lease."""
    ids = {name: f"{name}-{'0' * (36 - len(name))}" for name in ("run-a", "run-b", "adm-c", "que-d", "fin-e")}
    record(descriptor, ids["run-a"], "running", "g1", deadline_in=2990, age=3 * 3600)
    record(descriptor, ids["run-b"], "running", "g1", deadline_in=30)
    record(descriptor, ids["adm-c"], "admitted", "g2", deadline_in=600)
    record(descriptor, ids["que-d"], "queued", "g1")
    record(descriptor, ids["fin-e"], "finished", "g3", status="succeeded")
    aws("dynamodb").put_item(TableName=descriptor.sessions_table, Item={ATTR_SESSION_ID: {"S": trainer_item_key("t1")}})
    return ids


def test_sessions_lists_the_rollouts_holding_a_slot_soonest_deadline_first(descriptor, rollouts, capsys):
    # WHEN the rollouts in flight are listed
    assert main(["sessions", descriptor.exp_id]) == 0
    lines = capsys.readouterr().out.splitlines()
    # THEN a heading counts them by state with the time, and each line shows id, input, state, age and deadline
    assert lines[0].startswith("3 rollouts in flight (1 admitted, 2 running) at ") and lines[0].endswith(" UTC")
    assert [line.split()[:3] for line in lines[2:]] == [
        [rollouts["run-b"], "g1", "running"],
        [rollouts["adm-c"], "g2", "admitted"],
        [rollouts["run-a"], "g1", "running"],
    ]
    assert lines[4].split()[3] == "3h00m" and " in 49m" in lines[4]


def test_sessions_queued_adds_the_waiting_ones_and_json_gives_one_object_each(descriptor, rollouts, capsys):
    assert main(["sessions", descriptor.exp_id, "--queued", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {row["session_id"]: row["state"] for row in rows} == {
        rollouts["run-a"]: "running", rollouts["run-b"]: "running", rollouts["adm-c"]: "admitted",
        rollouts["que-d"]: "queued",
    }  # fmt: skip
    queued = next(row for row in rows if row["state"] == "queued")
    assert queued["deadline_at"] is None and queued["age_s"] == pytest.approx(7200, abs=60)


def test_cancel_sends_the_dispatcher_a_cancel_request_per_chosen_rollout(descriptor, rollouts, backend, capsys):
    # WHEN one session, then one input id's rollouts, then the rest are cancelled
    assert main(["cancel", descriptor.exp_id, "--session", rollouts["adm-c"], "--wait", "0"]) == 0
    assert [c.session_id for c in backend.receive(1)] == [rollouts["adm-c"]]
    assert main(["cancel", descriptor.exp_id, "--input-id", "g1", "--wait", "0"]) == 0
    cancels = backend.receive(3)
    # THEN each request names the rollout's key, queued ones included, and the command says what it sent
    assert {(c.input_id, c.session_id) for c in cancels} == {
        ("g1", rollouts["run-a"]), ("g1", rollouts["run-b"]), ("g1", rollouts["que-d"]),
    }  # fmt: skip
    assert all(c.exp_id == descriptor.exp_id and c.kind == "cancel" for c in cancels)
    assert "cancel requested for 3 rollouts: " in capsys.readouterr().out.splitlines()[-2]
    assert main(["cancel", descriptor.exp_id, "--all", "--wait", "0"]) == 0
    assert len(backend.receive(4)) == 4


def test_cancel_of_an_unknown_rollout_exits_1_and_of_an_ended_one_0_as_with_nothing_running(
    descriptor, rollouts, backend, capsys
):
    # GIVEN a finished rollout (its result stored, the table marked) and one whose result is stored but which the
    # sessions table still lists as running (the finisher has not marked it yet)
    store(descriptor, rollouts["fin-e"], "g3", "succeeded")
    store(descriptor, rollouts["run-b"], "g1", "agent_error")
    unknown = "u" * 36
    # WHEN an unknown session id is cancelled, THEN it is named and the exit status is 1
    assert main(["cancel", descriptor.exp_id, "--session", unknown]) == 1
    assert f"no rollout {unknown} recorded in {descriptor.exp_id}'s sessions table" in capsys.readouterr().out
    # WHEN ended rollouts are cancelled, THEN each is reported with how it ended, from its stored result, and the
    # exit status is 0, as for an input id with nothing running
    assert main(["cancel", descriptor.exp_id, "--session", rollouts["fin-e"], "--session", rollouts["run-b"]]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"rollout {rollouts['fin-e']} already ended (succeeded): nothing to cancel",
        f"rollout {rollouts['run-b']} already ended (agent_error): nothing to cancel",
        "nothing to cancel: no rollout in flight",
    ]
    assert main(["cancel", descriptor.exp_id, "--input-id", "g-none"]) == 0
    assert capsys.readouterr().out == "nothing to cancel: no rollout of input id g-none in flight\n"
    depth = aws("sqs").get_queue_attributes(
        QueueUrl=descriptor.dispatch_queue_url, AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]["ApproximateNumberOfMessages"]
    assert depth == "0"  # no cancel request was sent


def test_cancel_of_a_group_sends_nothing_to_the_ones_already_ended_and_counts_them_in_one_line(
    descriptor, rollouts, backend, capsys
):
    # GIVEN one of g1's three rollouts ended (its result stored) while the sessions table still lists it
    store(descriptor, rollouts["run-b"], "g1", "succeeded")
    # WHEN g1 is cancelled
    assert main(["cancel", descriptor.exp_id, "--input-id", "g1", "--wait", "0"]) == 0
    # THEN only the two others are sent a cancel, and one line says the third had ended, and how
    assert {c.session_id for c in backend.receive(2)} == {rollouts["run-a"], rollouts["que-d"]}
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "1 rollout listed in flight already ended with a stored result (1 succeeded): nothing to cancel"
    assert lines[1].startswith("cancel requested for 2 rollouts: ")


def test_cancel_says_how_each_rollout_it_asked_to_cancel_really_ended(descriptor, rollouts, backend, capsys):
    # GIVEN a dispatcher that ends one of g1's rollouts cancelled, while the other had succeeded before the cancel
    def dispatcher():
        for cancel in backend.receive(3):
            status = "succeeded" if cancel.session_id == rollouts["run-a"] else "cancelled"
            store(descriptor, cancel.session_id, cancel.input_id, status)

    thread = threading.Thread(target=dispatcher)
    thread.start()
    # WHEN g1's rollouts are cancelled
    assert main(["cancel", descriptor.exp_id, "--input-id", "g1"]) == 0
    thread.join()
    # THEN it says what it requested and how each ended: two cancelled, one succeeded first
    *_, requested, ended = capsys.readouterr().out.splitlines()
    assert requested.startswith("cancel requested for 3 rollouts: ")
    assert ended.startswith("after ") and ended.endswith(" s: 2 cancelled, ended first: 1 succeeded")


def test_sessions_does_not_show_running_a_rollout_whose_result_is_stored(descriptor, rollouts, capsys):
    # GIVEN a rollout the sessions table lists as running whose result is stored (the finisher not there yet)
    store(descriptor, rollouts["run-b"], "g1", "succeeded")
    # WHEN the rollouts in flight are listed
    assert main(["sessions", descriptor.exp_id]) == 0
    lines = capsys.readouterr().out.splitlines()
    # THEN it is not among them, and a line says one listed rollout already ended, and how
    assert lines[0].startswith("2 rollouts in flight (1 admitted, 1 running) at ")
    assert rollouts["run-b"] not in "\n".join(lines[:-1])
    assert lines[-1].startswith("1 rollout listed in flight already ended with a stored result (1 succeeded)")
    # AND --json gives it as ended, with its status
    assert main(["sessions", descriptor.exp_id, "--json"]) == 0
    rows = {row["session_id"]: row for row in map(json.loads, capsys.readouterr().out.splitlines())}
    assert (rows[rollouts["run-b"]]["state"], rows[rollouts["run-b"]]["status"]) == ("ended", "succeeded")


def test_sandboxes_are_listed_apart_and_never_sent_a_cancel(descriptor, rollouts, backend, capsys):
    # GIVEN a sandbox running beside the rollouts (same table, same session budget)
    sandbox = new_sandbox_session_id()
    record(descriptor, sandbox, "running", "task-7", deadline_in=600)
    # WHEN the sessions are listed, THEN the sandbox follows the rollouts under its own heading
    assert main(["sessions", descriptor.exp_id]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("3 rollouts in flight (1 admitted, 2 running)")
    assert lines[5].startswith("1 sandbox in flight (1 running)")
    assert lines[7].split()[:3] == [sandbox, "task-7", "running"]
    assert main(["sessions", descriptor.exp_id, "--json"]) == 0
    kinds = {row["session_id"]: row["kind"] for row in map(json.loads, capsys.readouterr().out.splitlines())}
    assert kinds[sandbox] == "sandbox" and kinds[rollouts["run-a"]] == "rollout"
    # AND cancel names it as a sandbox and --all passes it by (a cancel request for it would be refused)
    assert main(["cancel", descriptor.exp_id, "--session", sandbox, "--wait", "0"]) == 1
    assert f"{sandbox} is a sandbox, not a rollout" in capsys.readouterr().out
    assert main(["cancel", descriptor.exp_id, "--all", "--wait", "0"]) == 0
    assert sandbox not in {c.session_id for c in backend.receive(4)}
