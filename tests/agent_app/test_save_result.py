"""ART's ``app.save_result`` and ``app.s3_client``: same meaning, first writer still wins."""

from __future__ import annotations

import json

import pytest
from agent_app_support import BUCKET, EXP_ID, INPUT_ID, invoke, new_session, result_key_of, rollout_block, wait_for
from starlette.testclient import TestClient

from agent_app import AgentCoreRLApp
from rollout_contract import REDACTED, RolloutResult, Status


def _stored(s3, key: str) -> dict:
    return json.loads(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())


def test_save_result_stores_arts_document_and_leaves_the_input_alone(s3):
    # GIVEN an app and a handler-style dict
    app = AgentCoreRLApp(s3_client=s3)
    result = {"rewards": [0.0, 1.0], "answer": "42"}
    key = result_key_of(new_session())

    # WHEN the agent saves it itself, as ART's API allows
    stored = app.save_result(result, rollout_block(), key, payload={"q": 1, "_rollout": rollout_block(api_key="sk")})

    # THEN the object has ART's metadata, a succeeded status, the redacted payload, and `result` is unchanged
    assert stored is True
    body = _stored(s3, key)
    assert (body["status_code"], body["stop_reason"]) == (200, "end_turn")
    assert RolloutResult(body).status is Status.SUCCEEDED
    assert (body["input_id"], body["s3_bucket"], body["result_key"]) == (INPUT_ID, BUCKET, key)
    assert body["payload"]["_rollout"]["api_key"] == REDACTED
    assert RolloutResult(body).reward == 1.0
    assert result == {"rewards": [0.0, 1.0], "answer": "42"}


def test_save_result_keeps_the_first_writers_object(s3):
    app = AgentCoreRLApp(s3_client=s3)
    key = result_key_of(new_session())
    assert app.save_result({"rewards": 1.0}, rollout_block(), key) is True

    # WHEN a second write for the same rollout comes
    assert app.save_result({"rewards": 0.0}, rollout_block(), key) is False

    # THEN the first result stays
    assert _stored(s3, key)["rewards"] == 1.0


@pytest.mark.parametrize(
    ("config", "key", "message"),
    [
        ({"exp_id": EXP_ID, "s3_bucket": BUCKET}, f"{EXP_ID}/{INPUT_ID}/s.json", "Missing required rollout config"),
        ({}, f"{EXP_ID}/{INPUT_ID}/s.json", "Missing required rollout config"),
        (rollout_block(), f"{EXP_ID}/other/s.json", "is not exp-1/q-7/<session_id>.json"),
        (rollout_block(), f"{EXP_ID}/{INPUT_ID}/a/b.json", "session_id 'a/b' is invalid"),
    ],
)
def test_save_result_rejects_a_config_or_key_that_does_not_name_one_rollout(s3, config, key, message):
    with pytest.raises(ValueError, match=message):
        AgentCoreRLApp(s3_client=s3).save_result({"rewards": 1.0}, config, key)


def test_assigning_s3_client_redirects_the_entrypoints_writes(s3, aws_env):
    # GIVEN an app built with one client, then given another (ART's documented way to swap it)
    app = AgentCoreRLApp(s3_client=object())
    app.rollout_entrypoint(lambda payload: {"rewards": 0.5})
    app.s3_client = s3

    # WHEN a rollout runs
    session = new_session()
    with TestClient(app) as client:
        assert invoke(client, {"_rollout": rollout_block()}, session).status_code == 200
        wait_for(lambda: s3.list_objects_v2(Bucket=BUCKET).get("KeyCount", 0) == 1)

    # THEN the result went through the assigned client
    assert app.s3_client is s3
    assert RolloutResult(_stored(s3, result_key_of(session))).status is Status.SUCCEEDED


def test_s3_client_is_built_on_first_read_and_honours_the_endpoint_variable(aws_env, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:1")
    app = AgentCoreRLApp()
    client = app.s3_client
    assert client.meta.service_model.service_name == "s3"
    assert client.meta.endpoint_url == "http://127.0.0.1:1"
    assert app.s3_client is client
