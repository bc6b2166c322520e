"""The RL form of the math agent, end to end: payload -> Strands agent -> calculator -> reward -> S3."""

from __future__ import annotations

import json
import time

import pytest
from math_agent_fake_model import FakeModel
from moto import mock_aws
from starlette.testclient import TestClient

from agent_app import AgentCoreRLApp
from examples.math_agent.dataset import synthetic
from rollout_contract.protocol import SESSION_HEADER
from rollout_contract.results import REDACTED, RolloutResult, Status

BUCKET = "math-results"
SESSION = "5a0c1d9e-0000-4000-8000-000000000001"


@pytest.fixture
def s3(monkeypatch, boto_session):
    for name, value in {
        "AWS_ACCESS_KEY_ID": "t",
        "AWS_SECRET_ACCESS_KEY": "t",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    with mock_aws():
        client = boto_session.client("s3")
        client.create_bucket(Bucket=BUCKET)
        yield client


@pytest.mark.parametrize(("answer_offset", "reward"), [(0, 1.0), (1, 0.0)])
def test_rollout_uses_the_calculator_and_stores_the_reward(s3, answer_offset, reward):
    # GIVEN a synthetic problem (the ground truth possibly wrong), a scripted model and the RL app
    row = synthetic(1, seed=3)[0]
    # WHEN the rollout is invoked and runs to its end
    model, response, stored = _roll_out(s3, row, str(int(row["answer"]) + answer_offset), {"temperature": 0.7})
    # THEN the model was asked as configured, the calculator's value became the answer, and the reward is stored
    assert response.json()["result_key"] == f"math-1/p-0/{SESSION}.json"
    first_call = model.requests[0]
    assert first_call["body"]["model"] == "policy"
    assert first_call["body"]["temperature"] == 0.7
    assert first_call["authorization"] == "Bearer sk-test"
    assert "calculator" in json.dumps(first_call["body"]["tools"])
    assert stored.status is Status.SUCCEEDED
    assert stored.reward == reward
    assert stored.user_fields["response"].endswith(f"#### {row['answer']}")
    assert stored.payload["_rollout"]["api_key"] == REDACTED


#: What verl 0.9.1 (actor_rollout_ref.rollout defaults) and slime (its argument defaults) hand the rollout.
FRAMEWORK_DEFAULTS = {
    "verl": {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True},
    "slime": {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_tokens": 1024},
}


@pytest.mark.parametrize("framework", sorted(FRAMEWORK_DEFAULTS))
def test_a_frameworks_server_specific_sampling_parameters_reach_the_server_in_the_request_body(s3, framework):
    # GIVEN the sampling parameters a framework sends by default, top_k among them (not an OpenAI keyword)
    row = synthetic(1, seed=3)[0]
    # WHEN the rollout runs
    model, _, stored = _roll_out(s3, row, row["answer"], FRAMEWORK_DEFAULTS[framework])
    # THEN it succeeds, and every parameter reached the server as a field of the request body
    assert (stored.status, stored.reward) == (Status.SUCCEEDED, 1.0)
    for call in model.requests:
        assert FRAMEWORK_DEFAULTS[framework].items() <= call["body"].items()


def _roll_out(s3, row: dict, truth: str, sampling_params: dict) -> tuple[FakeModel, object, RolloutResult]:
    """Invoke the RL app on ``row`` against the scripted model; ``(model, response, stored result)``."""
    payload = {
        "prompt": row["prompt"],
        "answer": truth,
        "_rollout": {
            "exp_id": "math-1",
            "input_id": "p-0",
            "s3_bucket": BUCKET,
            "model_id": "policy",
            "sampling_params": sampling_params,
            "api_key": "sk-test",
        },
    }
    with FakeModel() as model:
        payload["_rollout"]["base_url"] = model.base_url
        client = TestClient(_app_writing_to(s3))
        response = client.post("/invocations", content=json.dumps(payload), headers={SESSION_HEADER: SESSION})
        _wait_until_healthy(client)
    stored = RolloutResult.from_json_bytes(
        s3.get_object(Bucket=BUCKET, Key=f"math-1/p-0/{SESSION}.json")["Body"].read()
    )
    return model, response, stored


def _app_writing_to(s3_client):
    """A fresh app with the example's handler, writing through ``s3_client`` (the constructor seam)."""
    from examples.math_agent import rl_app  # here, not at the top: Strands and the OpenAI SDK take 2 s to import

    app = AgentCoreRLApp(s3_client=s3_client)
    app.rollout_entrypoint(rl_app.invoke)
    return app


def _wait_until_healthy(client: TestClient, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while client.get("/ping").json()["status"] != "Healthy":
        assert time.monotonic() < deadline, "rollout did not finish"
        time.sleep(0.02)


def test_a_rollout_without_model_fields_fails_saying_what_to_give(s3):
    # GIVEN a payload whose _rollout names no model (the trainer was not given model_id)
    payload = {
        "prompt": "What is 2 + 2?",
        "answer": "4",
        "_rollout": {"exp_id": "math-1", "input_id": "p-1", "s3_bucket": BUCKET, "base_url": "http://127.0.0.1:9/v1"},
    }
    client = TestClient(_app_writing_to(s3))
    # WHEN it runs
    client.post("/invocations", content=json.dumps(payload), headers={SESSION_HEADER: SESSION})
    _wait_until_healthy(client)
    # THEN the stored agent_error says which field is missing and how to pass it
    stored = RolloutResult.from_json_bytes(
        s3.get_object(Bucket=BUCKET, Key=f"math-1/p-1/{SESSION}.json")["Body"].read()
    )
    assert stored.status is Status.AGENT_ERROR
    assert "model_id" in stored.error.message and "--model-id" in stored.error.message
