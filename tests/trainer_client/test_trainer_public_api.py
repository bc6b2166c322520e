"""The public API's edges: strict keywords, ids refused before sending, no botocore error escapes."""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.exceptions import ClientError as BotoClientError
from trainer_support import BUCKET, Backend, aws

from rollout_contract import DispatchRequest, InvalidIdError, RolloutResult, Status
from rollout_contract.messages import SQS_MAX_INLINE_PAYLOAD_BYTES
from rollout_contract.naming import EXPERIMENT_MAX_LENGTH
from trainer_client import AgentError, AwsError, RolloutClient, RolloutClientError, RolloutError, SubmitError


def _queued(backend) -> list:
    return backend.sqs.receive_message(QueueUrl=backend.descriptor.dispatch_queue_url).get("Messages") or []


def test_a_misspelt_constructor_keyword_is_an_error_that_names_the_fix(descriptor, fast_poll):
    # WHEN a trainer misspells a keyword (ART forwarded it to the agent silently)
    with pytest.raises(TypeError) as caught:
        RolloutClient.from_descriptor(descriptor, poll=fast_poll, sampling_parms={"temperature": 1.0})

    # THEN the error names it, the close match and the explicit way to pass agent config
    message = str(caught.value)
    assert "'sampling_parms'" in message and "did you mean 'sampling_params'" in message
    assert "rollout_config=" in message


def test_a_misspelt_invoke_keyword_is_an_error_and_nothing_is_sent(client, backend):
    with pytest.raises(TypeError, match="'timeuot' \\(did you mean 'timeout'\\?\\)"):
        client.invoke({}, timeuot=30)
    assert _queued(backend) == []


def test_batch_and_group_methods_check_keywords_before_the_first_item(client, backend):
    # WHEN the iterators are only created (not iterated) THEN the bad keyword already fails
    with pytest.raises(TypeError, match="run_batch\\(\\)"):
        client.run_batch([{}], 1, gatway_url="http://gw")
    with pytest.raises(TypeError, match="run_groups\\(\\)"):
        client.run_groups([{}], 2, 2, temperature=0.5)
    assert _queued(backend) == []


def test_rollout_config_carries_any_agent_field_and_named_keywords_win(descriptor, backend, fast_poll):
    # GIVEN client defaults with free-form agent config
    with RolloutClient.from_descriptor(
        descriptor, poll=fast_poll, model_id="m", rollout_config={"temperature": 0.3, "max_turns": 4}
    ) as client:
        # WHEN one rollout overrides a free-form field and a named one
        client.invoke({}, rollout_config={"max_turns": 8}, model_id="m2")

    # THEN the agent's _rollout block merges them: client defaults, then per-call config, named last
    (request,) = backend.receive(1)
    assert request.rollout == {"model_id": "m2", "temperature": 0.3, "max_turns": 8}


def test_rollout_config_may_not_set_the_fields_the_client_owns(client):
    with pytest.raises(ValueError, match="input_id"):
        client.invoke({}, rollout_config={"input_id": "x"})


@pytest.mark.parametrize(
    ("exp_id", "rule"),
    [
        ("gsm8k_grpo", "lowercase letters, digits and hyphens"),
        ("GSM8K", "lowercase"),
        ("a" * (EXPERIMENT_MAX_LENGTH + 1), f"1-{EXPERIMENT_MAX_LENGTH}"),
    ],
)
def test_experiment_ids_art_accepts_but_the_contract_refuses_fail_at_construction(descriptor, exp_id, rule):
    # ART sends such an id and learns only "Received error (400) from runtime"; here the rule is named first
    with pytest.raises(InvalidIdError, match=rule):
        RolloutClient(descriptor.runtime_arn, descriptor.results_bucket, exp_id)


@pytest.mark.parametrize("input_id", ["gsm8k/17", "prompt 3", "q?1"])
def test_input_ids_art_accepts_but_the_contract_refuses_fail_before_sending(client, backend, input_id):
    with pytest.raises(InvalidIdError, match="use only letters, digits, '.', '_', '~' and '-'"):
        client.invoke({}, input_id=input_id)
    with pytest.raises(InvalidIdError):
        client.run_batch([{}], 1, input_ids=[input_id]).__next__()
    assert _queued(backend) == []


def test_a_failed_large_payload_upload_is_a_submit_error_caused_by_botocore(client, descriptor):
    # GIVEN the results bucket is gone, so the payload cannot be parked in S3
    boto3.resource("s3").Bucket(descriptor.results_bucket).delete()

    # WHEN a payload too large for a message is submitted
    with pytest.raises(SubmitError) as caught:
        client.invoke({"document": "x" * (SQS_MAX_INLINE_PAYLOAD_BYTES + 1024)})

    # THEN the error is the package's, names the bucket, and keeps botocore's as its cause
    assert descriptor.results_bucket in str(caught.value)
    assert isinstance(caught.value.__cause__, BotoClientError)


def test_status_and_results_raise_aws_error_not_botocore_errors(client, descriptor):
    # GIVEN the experiment's bucket and a queue are gone
    boto3.resource("s3").Bucket(descriptor.results_bucket).delete()
    aws("sqs").delete_queue(QueueUrl=descriptor.completion_queue_url)

    # WHEN the trainer inspects the experiment THEN each failure is an AwsError with AWS's code
    with pytest.raises(AwsError) as status_error:
        client.status()
    with pytest.raises(AwsError) as results_error:
        list(client.results())
    assert results_error.value.code == "NoSuchBucket"
    for caught in (status_error, results_error):
        assert isinstance(caught.value, RolloutClientError) and isinstance(caught.value, RolloutError)
        assert not isinstance(caught.value, BotoClientError)
        assert isinstance(caught.value.__cause__, BotoClientError)


def test_results_read_like_arts_dicts_and_keep_typed_attributes(client, backend):
    # GIVEN ART-style trainer code reading a future's result and a batch item's result as dicts
    future = client.invoke({"reward": 0.25}, input_id="q1")
    failed = client.invoke({"end_as": "agent_error"}, input_id="q2")
    backend.serve(2)
    result = future.result(timeout=5)
    backend.serve_in_thread(1)
    (item,) = list(client.run_batch([{"reward": 0.75}], 1))

    # THEN the result is the stored document, a real dict as in ART, and the attributes stay typed
    stored = json.loads(aws("s3").get_object(Bucket=client.s3_bucket, Key=future.result_key)["Body"].read())
    assert isinstance(result, dict) and result == stored and json.loads(json.dumps(result)) == stored
    assert list(result) == list(stored) and dict(result.items()) == stored
    assert result["rewards"] == [0.25] and result.rewards == [0.25] and result.reward == 0.25
    assert result["status_code"] == 200 and result["stop_reason"] == "end_turn" and result["answer"] == "42"
    assert "status" not in result and result.status is Status.SUCCEEDED
    assert result["input_id"] == "q1" and result.timings.finished_at is not None
    assert "error" not in result and result.get("error") is None and result.get("missing", 3) == 3
    assert result["payload"]["reward"] == 0.25
    error = failed.result(timeout=5)
    assert error["status_code"] == 500 and error["stop_reason"] == "boom" and error.error.message == "boom"
    assert item.result is not None and item.result["rewards"] == [0.75]


def _art_agent(request: DispatchRequest) -> RolloutResult:
    """ART 0.2.0's agent: the handler's dict plus ART's metadata (no status, none of our fields)."""
    metadata = {"input_id": request.input_id, "s3_bucket": BUCKET, "result_key": str(request.key), "payload": {}}
    if (request.payload or {}).get("fail"):
        trace = "Traceback (most recent call last):\n  File \"agent.py\", line 9\nKeyError: 'answer'\n"
        return RolloutResult({"status_code": 500, "stop_reason": "'answer'", "traceback": trace, **metadata})
    return RolloutResult(
        {"rewards": [0.5], "status": "mine", "status_code": 200, "stop_reason": "end_turn", **metadata}
    )


def test_an_unmodified_art_agents_results_reach_futures_and_batches(descriptor, client):
    # GIVEN an agent that stores results as ART 0.2.0 does
    backend = Backend(descriptor, outcome=_art_agent)

    # WHEN a future and a batch run against it
    future = client.invoke({"fail": False}, input_id="q1")
    backend.serve(1)
    result = future.result(timeout=5)
    backend.serve_in_thread(2)
    items = sorted(client.run_batch([{"fail": False}, {"fail": True}], 2), key=lambda item: item.index)

    # THEN ART's fields decide each status, and the handler's own "status" key is left as it stored it
    assert result.status is Status.SUCCEEDED and result.reward == 0.5 and result["status"] == "mine"
    assert [item.success for item in items] == [True, False]
    failed = items[1].result
    assert failed is not None and failed.status is Status.AGENT_ERROR
    assert (failed.error.type, failed.error.message) == ("KeyError", "'answer'")
    with pytest.raises(AgentError, match="'answer'"):
        failed.raise_for_status()
    assert client.pending_count == 0
