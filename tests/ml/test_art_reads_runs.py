"""Runs keep ART's key layout: agentcore-rl-toolkit 0.2.0's own code builds our exp_id and reads our results.

Checked with ART's package (``.venv-ml``): its ``AgentCoreS3Session`` turns ``s3://BUCKET/EXPERIMENT`` and an
experiment name into exactly our ``experiment/run``; its ``RolloutFuture`` (HEAD polling, then GetObject) reads
a result our agent stored under a run; and our reader parses what ART's agent stores under ART's own
``runs/qwen3_gsm8k`` label as run ``qwen3_gsm8k`` of experiment ``runs``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("agentcore_rl_toolkit")

from agentcore_rl_toolkit import AgentCoreRLApp as ArtApp  # noqa: E402
from agentcore_rl_toolkit.client import RolloutFuture as ArtFuture  # noqa: E402
from agentcore_rl_toolkit.rollout_session.agentcore_s3_session import result_location  # noqa: E402
from moto import mock_aws  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from agent_app import AgentCoreRLApp  # noqa: E402
from rollout_contract import RolloutResult, join_exp_id, parse_result_key  # noqa: E402
from rollout_contract.protocol import SESSION_HEADER  # noqa: E402

BUCKET = "agentcore-rollouts-results-123456789012-us-west-2"
SESSION = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"


@pytest.fixture
def s3(boto_session, monkeypatch) -> Iterator[Any]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    with mock_aws():
        client = boto_session.client("s3")
        client.create_bucket(Bucket=BUCKET)
        yield client


def _rollout(app: Any, s3: Any, exp_id: str) -> str:
    """Invoke ``app`` as ACR does with a save target under ``exp_id``; return the key it answered."""
    app.s3_client = s3
    payload = {"x": 1, "_rollout": {"exp_id": exp_id, "input_id": "q-1", "s3_bucket": BUCKET}}
    with TestClient(app) as client:
        answer = client.post("/invocations", content=json.dumps(payload), headers={SESSION_HEADER: SESSION}).json()
        deadline = time.monotonic() + 10
        while client.get("/ping").json()["status"] != "Healthy":  # the rollout stores its result, then idles
            assert time.monotonic() < deadline, "the rollout did not finish within 10 s"
            time.sleep(0.01)
    return str(answer["result_key"])


def test_arts_s3_session_builds_our_exp_id_from_our_experiment_and_a_run() -> None:
    # ART's AgentCoreS3Session with rollout_output_s3 = s3://<our bucket>/<experiment> and experiment_name = <run>
    assert result_location(f"s3://{BUCKET}/gsm8k", "qwen3-eval") == (BUCKET, join_exp_id("gsm8k", "qwen3-eval"))


def test_arts_reader_reads_a_result_our_agent_stored_under_a_run(s3: Any) -> None:
    # GIVEN our agent stored a rollout of run 'qwen3-eval' of experiment 'gsm8k'
    app = AgentCoreRLApp()
    app.rollout_entrypoint(lambda payload: {"rewards": 0.75})
    key = _rollout(app, s3, "gsm8k/qwen3-eval")
    # WHEN ART's own future, polling as ART does, reads that key
    document = ArtFuture(s3, BUCKET, f"gsm8k/qwen3-eval/q-1/{SESSION}.json", initial_interval=0.01).result(timeout=10)
    # THEN it is the stored document, at ART's {exp_id}/{input_id}/{session_id}.json, with ART's fields
    assert key == f"gsm8k/qwen3-eval/q-1/{SESSION}.json"
    assert (document["rewards"], document["status_code"], document["result_key"]) == (0.75, 200, key)


def test_what_arts_agent_stores_under_its_own_label_is_a_run_to_our_reader(s3: Any) -> None:
    # GIVEN ART's agent stored a rollout under ART 0.2.0's own label 'runs/qwen3_gsm8k'
    app = ArtApp()
    app.rollout_entrypoint(lambda payload: {"rewards": 1.0})
    key = _rollout(app, s3, "runs/qwen3_gsm8k")
    # WHEN our reader takes its key and document
    parsed = parse_result_key(key)
    result = RolloutResult.from_json_bytes(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())
    # THEN it is run 'qwen3_gsm8k' of experiment 'runs', and its reward reads
    assert (parsed.experiment, parsed.exp_id, parsed.session_id) == ("runs", "runs/qwen3_gsm8k", SESSION)
    assert (result.exp_id, result.reward) == ("runs/qwen3_gsm8k", 1.0)
