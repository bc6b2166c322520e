"""S3's rule for missing keys: 403, not 404, to a caller that may not list the whole bucket (the trainer role)."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError
from trainer_support import BUCKET, aws

from trainer_client import RolloutClient
from trainer_client._stored import read_if_stored
from trainer_client.doctor import Experiment, _result_exists

MISSING = "exp-test/q/" + "0" * 36 + ".json"


def test_the_test_server_answers_a_missing_key_with_403_as_s3_does_for_the_trainer(descriptor):
    # GIVEN the trainer's credentials (no bucket-wide ListBucket) WHEN it reads a missing key THEN S3 says 403
    with pytest.raises(ClientError) as raised:
        aws("s3").get_object(Bucket=BUCKET, Key=MISSING)
    assert raised.value.response["Error"]["Code"] == "AccessDenied"


def test_a_missing_result_reads_as_none_and_a_stored_one_as_its_object(descriptor):
    # GIVEN one stored object and one missing key
    s3 = aws("s3")
    s3.put_object(Bucket=BUCKET, Key="exp-test/q/stored.json", Body=b"{}")
    # WHEN both are read THEN the missing one is None (not an error) and the stored one its object (bytes, metadata)
    assert read_if_stored(s3, BUCKET, MISSING) is None
    assert read_if_stored(s3, BUCKET, "exp-test/q/stored.json")["Body"].read() == b"{}"


def test_attach_waits_for_rollouts_that_have_no_result_yet(descriptor, backend, fast_poll):
    # GIVEN a rollout still running WHEN a new client attaches it THEN it waits for its event (main raised AwsError)
    with RolloutClient.from_descriptor(descriptor, poll=fast_poll) as client:
        (future,) = client.attach([MISSING])
        assert not future.done()


def test_the_doctors_stuck_canary_check_sees_a_missing_result_as_missing(descriptor):
    # GIVEN the doctor with the trainer's credentials WHEN it asks whether a missing result exists THEN it says no
    doctor = Experiment(descriptor, {"s3": aws("s3")})
    assert _result_exists(doctor, MISSING) is False
