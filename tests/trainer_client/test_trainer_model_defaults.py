"""The experiment's model defaults: its descriptor names the model, and the fields its agent needs are checked."""

from __future__ import annotations

import json

import pytest
from trainer_support import FAST_POLL, aws, publish

from trainer_client import MissingRolloutFieldError, RolloutClient
from trainer_client._cli import main


def test_the_descriptors_model_is_the_default_and_a_call_overrides_it(descriptor, backend):
    # GIVEN an experiment whose descriptor names a model
    publish(descriptor, model_id="policy-v3", required_rollout_fields=["model_id"])
    with RolloutClient.for_experiment(descriptor.exp_id, poll=FAST_POLL) as client:
        # WHEN one rollout names no model and another names its own
        client.invoke({"q": 1})
        client.invoke({"q": 2}, model_id="other")
        # THEN the first is sent with the experiment's model, the second with its own
        requests = backend.receive(2)
    assert [request.rollout["model_id"] for request in requests] == ["policy-v3", "other"]


def test_a_keyword_given_as_none_keeps_the_descriptors_model_and_gateway(descriptor, backend):
    # GIVEN an experiment whose descriptor names a model and a gateway, and an adapter that passes its unset
    # settings on as None (the framework adapters' shared client does: model_id=None, region=None)
    publish(descriptor, model_id="policy-v3", gateway_url="http://gw:9090")
    with RolloutClient.for_experiment(descriptor.exp_id, poll=FAST_POLL, model_id=None, region=None) as client:
        # WHEN a rollout names no model THEN it is sent with the experiment's model, through its gateway
        client.invoke({"q": 1})
        (request,) = backend.receive(1)
    assert request.rollout["model_id"] == "policy-v3"
    assert request.rollout["base_url"].startswith("http://gw:9090/sessions/")


def test_a_rollout_without_a_field_the_agent_needs_is_refused_before_anything_is_sent(descriptor, backend):
    # GIVEN an experiment whose agent needs a model name, and no default for it
    publish(descriptor, required_rollout_fields=["model_id"])
    with RolloutClient.for_experiment(descriptor.exp_id, poll=FAST_POLL) as client:
        # WHEN a rollout names no model THEN the submit is refused, saying which field and how to give it
        with pytest.raises(MissingRolloutFieldError, match=r"needs _rollout.model_id.*--model-id NAME"):
            client.invoke({"q": 1})
        assert client.pending_count == 0
    # AND nothing reached the dispatch queue
    attributes = aws("sqs").get_queue_attributes(
        QueueUrl=descriptor.dispatch_queue_url, AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == "0"


def test_eval_without_a_model_the_agent_needs_stops_at_once_and_names_the_option(descriptor, tmp_path, capsys):
    publish(descriptor, required_rollout_fields=["model_id"])
    (tmp_path / "in.jsonl").write_text(json.dumps({"q": 1}) + "\n")
    code = main(["eval", descriptor.exp_id, "--dataset", str(tmp_path / "in.jsonl"), "--output",
                 str(tmp_path / "out.jsonl"), "--poll-wait", "1"])  # fmt: skip
    assert code == 1
    err = capsys.readouterr().err
    assert "needs _rollout.model_id" in err and "`rollouts eval --model-id NAME`" in err
    assert "Traceback" not in err
