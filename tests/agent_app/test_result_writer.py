"""Result writing: first writer wins, transient S3 errors retried, final ones reported."""

from __future__ import annotations

import logging

import pytest
from agent_app_support import BUCKET, FlakyS3, invoke, new_session, read_result, rollout_block, wait_until_healthy

from agent_app._results import Backoff, ResultWriteError, ResultWriter
from rollout_contract.results import RolloutResult, Status

NO_WAIT = Backoff(attempts=3, base_delay_s=0.0)


def test_transient_s3_error_is_retried_until_the_result_is_stored(make_client, s3):
    # GIVEN an S3 client whose first two writes fail with 503 SlowDown
    flaky = FlakyS3(s3, failures=2)
    client = make_client(lambda payload: {"rewards": 1.0}, s3_client=flaky)
    session_id = new_session()

    # WHEN a rollout finishes
    invoke(client, {"_rollout": rollout_block()}, session_id)
    wait_until_healthy(client)

    # THEN the third attempt stores the result
    assert flaky.calls == 3
    assert RolloutResult(read_result(s3, session_id)).status is Status.SUCCEEDED


def test_writer_reports_losing_to_an_earlier_writer(s3):
    # GIVEN an object already at the key
    s3.put_object(Bucket=BUCKET, Key="exp-1/q/k.json", Body=b"first")
    writer = ResultWriter(s3, backoff=NO_WAIT)

    # WHEN another write targets the same key
    stored = writer.write(BUCKET, "exp-1/q/k.json", b"second")

    # THEN it says it lost, and the first object stays
    assert stored is False
    assert s3.get_object(Bucket=BUCKET, Key="exp-1/q/k.json")["Body"].read() == b"first"


def test_writer_gives_up_after_the_retry_budget(s3):
    # GIVEN an S3 client that always answers 503
    writer = ResultWriter(FlakyS3(s3, failures=10), backoff=NO_WAIT)

    # WHEN a write is attempted
    # THEN it fails after the budget, saying so
    with pytest.raises(ResultWriteError, match="all 3 attempts"):
        writer.write(BUCKET, "exp-1/q/k.json", b"{}")


def test_writer_does_not_retry_a_final_error(s3):
    # GIVEN a bucket that does not exist
    writer = ResultWriter(s3, backoff=NO_WAIT)

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
