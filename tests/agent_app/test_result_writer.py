"""Result writing: first writer wins, transient S3 errors retried by botocore alone, final ones reported."""

from __future__ import annotations

import logging

import pytest
from agent_app_support import (
    BUCKET,
    failing_puts,
    invoke,
    new_session,
    read_result,
    rollout_block,
    wait_until_healthy,
)

from agent_app import AgentCoreRLApp
from agent_app._results import RESULT_WRITE_ATTEMPTS, ResultWriteError, ResultWriter
from rollout_contract.aws import ClientFactory
from rollout_contract.results import RolloutResult, Status


def _no_wait(_: float) -> None:
    return None


def test_transient_s3_error_is_retried_until_the_result_is_stored(make_client, s3):
    # GIVEN the S3 client the app builds itself, whose first two writes S3 answers with 500 InternalError
    app = AgentCoreRLApp()
    attempts = failing_puts(app.s3_client, failures=2)
    client = make_client(lambda payload: {"rewards": 1.0}, s3_client=app.s3_client)
    session_id = new_session()

    # WHEN a rollout finishes
    invoke(client, {"_rollout": rollout_block()}, session_id)
    wait_until_healthy(client)

    # THEN botocore's third attempt stores the result
    assert len(attempts) == 3
    assert app.s3_client.meta.config.retries == {"total_max_attempts": RESULT_WRITE_ATTEMPTS, "mode": "standard"}
    assert RolloutResult(read_result(s3, session_id)).status is Status.SUCCEEDED


def test_a_transient_error_outlasting_botocore_is_not_retried_again_by_the_writer(s3):
    # GIVEN a client with botocore's 3 attempts, and S3 answering 500 to every write
    client = ClientFactory(max_attempts=3).client("s3")
    attempts = failing_puts(client, failures=100)
    writer = ResultWriter(client, sleep=_no_wait)

    # WHEN a write is attempted
    # THEN it fails after botocore's 3 attempts, not 3 times the writer's own (up to 24 tries before D79)
    with pytest.raises(ResultWriteError, match="InternalError"):
        writer.write(BUCKET, "exp-1/q/k.json", b"{}")
    assert len(attempts) == 3


def test_a_write_racing_another_conditional_write_is_tried_again(s3):
    # GIVEN S3 answering the first write 409 ConditionalRequestConflict (another conditional put in flight)
    client = ClientFactory(max_attempts=3).client("s3")
    attempts = failing_puts(client, failures=1, code="ConditionalRequestConflict", status=409)

    # WHEN a write is attempted
    stored = ResultWriter(client, sleep=_no_wait).write(BUCKET, "exp-1/q/k.json", b"{}")

    # THEN the writer tries again (botocore does not retry a 409) and stores it
    assert stored is True and len(attempts) == 2
    assert s3.get_object(Bucket=BUCKET, Key="exp-1/q/k.json")["Body"].read() == b"{}"


def test_writer_reports_losing_to_an_earlier_writer(s3):
    # GIVEN an object already at the key
    s3.put_object(Bucket=BUCKET, Key="exp-1/q/k.json", Body=b"first")
    writer = ResultWriter(s3)

    # WHEN another write targets the same key
    stored = writer.write(BUCKET, "exp-1/q/k.json", b"second")

    # THEN it says it lost, and the first object stays
    assert stored is False
    assert s3.get_object(Bucket=BUCKET, Key="exp-1/q/k.json")["Body"].read() == b"first"


def test_writer_does_not_retry_a_final_error(s3):
    # GIVEN a bucket that does not exist
    writer = ResultWriter(s3)

    # WHEN a write targets it
    # THEN the error is reported at once, naming the object
    with pytest.raises(ResultWriteError, match="s3://no-such-bucket/k.json"):
        writer.write("no-such-bucket", "k.json", b"{}")


def test_failed_write_is_logged_and_ping_returns_to_healthy(make_client, caplog):
    # GIVEN a rollout whose bucket does not exist
    client = make_client(lambda payload: {"rewards": 1.0})

    # WHEN it finishes
    with caplog.at_level(logging.ERROR, logger="agent_app"):
        invoke(client, {"_rollout": rollout_block(s3_bucket="no-such-bucket")}, new_session())
        wait_until_healthy(client)

    # THEN the failure is logged and the session is not stuck busy
    assert any("result not stored" in record.getMessage() for record in caplog.records)
