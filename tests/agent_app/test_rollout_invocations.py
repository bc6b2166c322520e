"""``/invocations`` of ``AgentCoreRLApp``: the ``_rollout`` rules, results, errors and duplicates."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from agent_app_support import (
    BUCKET,
    EXP_ID,
    INPUT_ID,
    invoke,
    list_keys,
    new_session,
    read_result,
    result_key_of,
    rollout_block,
    wait_until_healthy,
)

from rollout_contract.results import REDACTED, RolloutResult, Status


def test_full_rollout_target_answers_processing_and_stores_succeeded_result(make_client, s3):
    # GIVEN an app whose handler returns a reward and an answer
    client = make_client(lambda payload: {"rewards": 1.0, "response": f"#### {payload['x']}"})
    session_id = new_session()

    # WHEN it is invoked with all three save fields
    response = invoke(client, {"x": 42, "_rollout": rollout_block()}, session_id)
    wait_until_healthy(client)

    # THEN it answers at once with where the result goes, and the result holds the handler's fields
    assert response.status_code == 200
    assert response.json() == {"status": "processing", "s3_bucket": BUCKET, "result_key": result_key_of(session_id)}
    result = RolloutResult(read_result(s3, session_id))
    assert result.status is Status.SUCCEEDED
    assert (result.status_code, result.stop_reason) == (200, "end_turn")
    assert (result.exp_id, result.input_id, result.session_id) == (EXP_ID, INPUT_ID, session_id)
    assert result.reward == 1.0
    assert result.user_fields == {"response": "#### 42"}
    assert result.timings.started_at <= result.timings.finished_at


def test_no_rollout_target_runs_handler_but_saves_nothing(make_client, s3):
    # GIVEN a handler that records that it ran
    ran = threading.Event()

    def handler(payload):
        ran.set()
        return {"rewards": 0.0}

    client = make_client(handler)

    # WHEN it is invoked without any save field
    response = invoke(client, {"prompt": "hi"}, new_session())
    wait_until_healthy(client)

    # THEN it answers processing (nothing else), runs the handler, and stores no object
    assert response.status_code == 200
    assert response.json() == {"status": "processing"}
    assert ran.is_set()
    assert list_keys(s3) == []


@pytest.mark.parametrize(
    ("given", "missing"),
    [({"exp_id": EXP_ID}, ["input_id", "s3_bucket"]), ({"exp_id": EXP_ID, "input_id": INPUT_ID}, ["s3_bucket"])],
)
def test_partial_rollout_target_is_http_500_naming_missing_fields(make_client, s3, given, missing):
    # GIVEN a handler that must not run
    ran = threading.Event()
    client = make_client(lambda payload: ran.set())

    # WHEN the _rollout block names only some of the save fields
    response = invoke(client, {"_rollout": given}, new_session())

    # THEN the answer is a JSON 500 naming each missing field, and no rollout started
    assert response.status_code == 500
    error = response.json()["error"]
    assert all(name in error for name in missing)
    assert not ran.is_set()
    assert list_keys(s3) == []


def test_invalid_exp_id_is_http_400_saying_what_is_allowed(make_client):
    # GIVEN an app
    client = make_client(lambda payload: {})

    # WHEN exp_id could not begin a result key (an empty part between two '/')
    response = invoke(client, {"_rollout": rollout_block(exp_id="runs//exp")}, new_session())

    # THEN it is rejected with a message naming the rule
    assert response.status_code == 400
    assert "'/' only between parts" in response.json()["error"]


@pytest.mark.parametrize("exp_id", ["runs/qwen3_gsm8k", "gsm8k_eval"])
def test_exp_ids_art_writes_under_are_stored_under_arts_key(make_client, s3, exp_id):
    # GIVEN an app, and the exp_id of ART 0.2.0's AgentCoreS3Session ('<prefix>/<experiment>') or its
    # evaluate.py default, which the agent refused with 400 before runs were part of the contract
    client = make_client(lambda payload: {"rewards": 1.0})
    session_id = new_session()

    # WHEN it is invoked with it
    response = invoke(client, {"_rollout": rollout_block(exp_id=exp_id)}, session_id)
    wait_until_healthy(client)

    # THEN the result is stored at ART's key {exp_id}/{input_id}/{session_id}.json
    assert response.status_code == 200
    assert list_keys(s3) == [f"{exp_id}/{INPUT_ID}/{session_id}.json"]


def test_non_object_payload_is_http_400(make_client):
    client = make_client(lambda payload: {})

    response = invoke(client, [1, 2, 3], new_session())

    assert response.status_code == 400
    assert "JSON object" in response.json()["error"]


def test_handler_exception_stores_agent_error_with_traceback(make_client, s3):
    # GIVEN a handler that raises
    def handler(payload):
        raise RuntimeError("tool crashed")

    client = make_client(handler)
    session_id = new_session()

    # WHEN it runs
    invoke(client, {"_rollout": rollout_block()}, session_id)
    wait_until_healthy(client)

    # THEN the result is agent_error with the exception's type, message and traceback, and no reward
    result = RolloutResult(read_result(s3, session_id))
    assert result.status is Status.AGENT_ERROR
    assert result.status_code == 500
    assert result.stop_reason == "tool crashed"
    assert result.error.type == "RuntimeError"
    assert "raise RuntimeError" in result.error.traceback
    assert result.rewards is None


@pytest.mark.parametrize("exit_error", [SystemExit(3), KeyboardInterrupt()])
def test_a_handler_that_exits_fails_its_rollout_and_the_agent_serves_on(make_client, s3, exit_error):
    # GIVEN a handler that raises SystemExit or KeyboardInterrupt on its first call only
    calls = []

    def handler(payload):
        calls.append(payload)
        if len(calls) == 1:
            raise exit_error
        return {"rewards": 1.0}

    client = make_client(handler)
    first, second = new_session(), new_session()

    # WHEN two rollouts run one after the other
    invoke(client, {"_rollout": rollout_block()}, first)
    wait_until_healthy(client)
    invoke(client, {"_rollout": rollout_block()}, second)
    wait_until_healthy(client)

    # THEN the first ended agent_error with ART's status_code 500, and the agent went on to run the second
    failed = RolloutResult(read_result(s3, first))
    assert failed.status is Status.AGENT_ERROR and failed["status_code"] == 500
    assert failed.error.type == type(exit_error).__name__
    assert RolloutResult(read_result(s3, second)).reward == 1.0


def test_non_dict_return_stores_agent_error_naming_the_type(make_client, s3):
    # GIVEN a handler that returns a bare float
    client = make_client(lambda payload: 0.5)
    session_id = new_session()

    # WHEN it runs
    invoke(client, {"_rollout": rollout_block()}, session_id)
    wait_until_healthy(client)

    # THEN the result is agent_error saying a float came back where a dict belongs, in ART's words
    result = RolloutResult(read_result(s3, session_id))
    assert result.status is Status.AGENT_ERROR
    assert result.stop_reason == "Return value must be a dict when S3 save is configured, got float"


@pytest.mark.parametrize(
    ("rewards", "message"),
    [
        ("very good", "rewards is a string ('very good')"),
        ({"score": 1}, "rewards is an object ({'score': 1})"),
        ([0.5, None], "rewards[1] is null (None)"),
    ],
)
def test_a_reward_that_is_not_a_number_ends_agent_error_naming_the_field_and_type(make_client, s3, rewards, message):
    # GIVEN a handler that returns a reward that is not a finite number or a list of them
    client = make_client(lambda payload: {"rewards": rewards, "response": "42"})
    session_id = new_session()

    # WHEN it runs
    invoke(client, {"_rollout": rollout_block()}, session_id)
    wait_until_healthy(client)

    # THEN the rollout is agent_error (InvalidReward) naming the field and the value's type; the document the
    # agent returned is stored as ART stores it (its rewards, ART's status_code 200)
    stored = read_result(s3, session_id)
    result = RolloutResult(stored)
    assert result.status is Status.AGENT_ERROR and result.reward is None
    assert result.error is not None and result.error.type == "InvalidReward"
    assert result.error.message.startswith(message)
    assert stored["rewards"] == rewards and stored["status_code"] == 200


def test_unstorable_dict_stores_agent_error(make_client, s3):
    # GIVEN a handler whose dict holds a value JSON cannot encode
    client = make_client(lambda payload: {"rewards": 1.0, "trace": object()})
    session_id = new_session()

    # WHEN it runs
    invoke(client, {"_rollout": rollout_block()}, session_id)
    wait_until_healthy(client)

    # THEN the rollout still ends in one result: agent_error explaining why (json's message, as in ART)
    result = RolloutResult(read_result(s3, session_id))
    assert result.status is Status.AGENT_ERROR
    assert result.stop_reason == "Object of type object is not JSON serializable"


def test_repeated_invocation_of_a_session_starts_one_rollout(make_client, s3):
    # GIVEN a handler that blocks until released and counts its runs
    release = threading.Event()
    runs: list[int] = []

    def handler(payload):
        runs.append(1)
        release.wait(10)
        return {"rewards": 1.0}

    client = make_client(handler)
    session_id = new_session()
    payload = {"_rollout": rollout_block()}

    # WHEN the same session is invoked while running and again after it finished
    first = invoke(client, payload, session_id)
    while_running = invoke(client, payload, session_id)
    release.set()
    wait_until_healthy(client)
    after_finish = invoke(client, payload, session_id)

    # THEN all three get the same answer, the handler ran once, and /ping stays healthy
    assert first.json() == while_running.json() == after_finish.json()
    assert len(runs) == 1
    assert wait_until_healthy(client, timeout_s=0.5)["status"] == "Healthy"
    assert list_keys(s3) == [result_key_of(session_id)]


def test_stored_payload_redacts_api_key_and_user_keys_but_handler_sees_them(make_client, s3):
    # GIVEN an app that redacts "password", and a handler that records what it received
    seen: dict[str, Any] = {}

    def handler(payload):
        seen.update(payload)
        return {"rewards": 1.0}

    client = make_client(handler, redact_keys=["password"])
    session_id = new_session()
    payload = {"user": {"password": "hunter2", "name": "ada"}, "_rollout": rollout_block(api_key="sk-secret")}

    # WHEN it runs
    invoke(client, payload, session_id)
    wait_until_healthy(client)

    # THEN the handler saw the secrets, and the stored payload has none of them
    assert seen["_rollout"]["api_key"] == "sk-secret"
    assert seen["user"]["password"] == "hunter2"
    stored = read_result(s3, session_id)["payload"]
    assert stored["_rollout"]["api_key"] == REDACTED
    assert stored["user"] == {"password": REDACTED, "name": "ada"}
    assert "sk-secret" not in str(read_result(s3, session_id))


def test_existing_result_object_is_kept(make_client, s3):
    # GIVEN a result already stored for the session (e.g. the sweeper's timed_out)
    session_id = new_session()
    s3.put_object(Bucket=BUCKET, Key=result_key_of(session_id), Body=b'{"status": "timed_out"}')
    client = make_client(lambda payload: {"rewards": 1.0})

    # WHEN the agent finishes late
    invoke(client, {"_rollout": rollout_block()}, session_id)
    wait_until_healthy(client)

    # THEN the first writer's object stays
    assert read_result(s3, session_id) == {"status": "timed_out"}


def test_timings_carry_submitted_and_dispatched_times_from_rollout_block(make_client, s3):
    client = make_client(lambda payload: {"rewards": 1.0})
    session_id = new_session()

    invoke(client, {"_rollout": rollout_block(submitted_at=100.0, dispatched_at=105.5)}, session_id)
    wait_until_healthy(client)

    timings = RolloutResult(read_result(s3, session_id)).timings
    assert (timings.submitted_at, timings.dispatched_at) == (100.0, 105.5)
    assert timings.dispatch_delay_s == 5.5
    assert timings.started_at > timings.dispatched_at
