"""Provisioning against a real moto server: idempotent, and result events reach the right queues."""

from __future__ import annotations

import json
from typing import Any

import pytest

from local_stack.moto_server import LOCAL_REGION, endpoints_for
from local_stack.provision import AwsClients, ProvisionedExperiment, provision_experiment, provision_shared
from local_stack.stack import runtime_arn
from rollout_contract import ExperimentDescriptor, ExperimentResources, result_key
from rollout_contract.credentials import ExperimentSecret, read_secret
from rollout_contract.keys import payload_ref_key
from rollout_contract.resources import BUDGET_TABLE, INFLIGHT_INDEX, LOCAL_RESULTS_BUCKET

pytestmark = pytest.mark.processes

SESSION_ID = "0123456789abcdef0123456789abcdef0123"


def _provision(aws: AwsClients, moto_url: str, exp_id: str) -> ProvisionedExperiment:
    provision_shared(aws)
    return provision_experiment(
        aws,
        exp_id,
        region=LOCAL_REGION,
        runtime_arn=runtime_arn(exp_id),
        endpoints=endpoints_for(moto_url, "http://127.0.0.1:1"),
        gateway_url="http://127.0.0.1:2",
    )


def _drain(aws: AwsClients, queue_url: str) -> list[dict[str, Any]]:
    messages = aws.sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get(
        "Messages", []
    )
    return [json.loads(m["Body"]) for m in messages]


@pytest.fixture(scope="module")
def provisioned(aws: AwsClients, moto) -> ProvisionedExperiment:
    return _provision(aws, moto.url, "prov-routing")


def test_provisioning_twice_leaves_the_same_resources(aws: AwsClients, moto) -> None:
    # GIVEN an experiment provisioned once
    first = _provision(aws, moto.url, "prov-twice")
    # WHEN it is provisioned again
    second = _provision(aws, moto.url, "prov-twice")
    # THEN nothing fails and the resources are the same ones
    assert second == first
    resources = ExperimentResources.for_experiment("prov-twice")
    names = {
        url.rsplit("/", 1)[1] for url in aws.sqs.list_queues(QueueNamePrefix=resources.dispatch_queue.name)["QueueUrls"]
    }
    assert names == {resources.dispatch_queue.name, resources.dispatch_queue.dlq_name}
    targets = aws.events.list_targets_by_rule(Rule=resources.result_rule_name)["Targets"]
    assert len(targets) == 2


def test_the_experiments_secrets_are_created_once_with_random_values(aws: AwsClients, moto) -> None:
    # GIVEN two experiments, one provisioned twice
    _provision(aws, moto.url, "prov-secrets")

    def values(exp_id: str) -> dict[ExperimentSecret, str]:
        return {secret: read_secret(aws.secretsmanager, exp_id, secret) for secret in ExperimentSecret}

    first = values("prov-secrets")
    _provision(aws, moto.url, "prov-secrets")
    _provision(aws, moto.url, "prov-secrets-2")
    # THEN each experiment has its three secrets (D100), kept as they were, each value its own and hard to guess
    assert values("prov-secrets") == first
    every = [*first.values(), *values("prov-secrets-2").values()]
    assert len(set(every)) == 6 and all(len(value) >= 64 for value in every)


def test_result_put_under_the_experiment_prefix_reaches_completion_and_finisher_queues(
    aws: AwsClients, provisioned: ProvisionedExperiment
) -> None:
    # GIVEN a provisioned experiment
    descriptor = provisioned.descriptor
    key = result_key("prov-routing", "input-1", SESSION_ID)
    # WHEN a result object is written under its prefix
    aws.s3.put_object(Bucket=descriptor.results_bucket, Key=key, Body=b"{}")
    # THEN the completion queue and the finisher queue each get the Object Created event, the dispatch queue none
    for queue_url in (descriptor.completion_queue_url, provisioned.finisher_queue_url):
        events = _drain(aws, queue_url)
        assert [e["detail"]["object"]["key"] for e in events] == [key]
        assert events[0]["detail-type"] == "Object Created"
    assert _drain(aws, descriptor.dispatch_queue_url) == []


def test_puts_outside_the_experiment_prefix_reach_no_queue(aws: AwsClients, provisioned: ProvisionedExperiment) -> None:
    # GIVEN a provisioned experiment
    descriptor = provisioned.descriptor
    # WHEN objects are written under another experiment's prefix and as a parked payload
    aws.s3.put_object(Bucket=descriptor.results_bucket, Key=result_key("other-exp", "i", SESSION_ID), Body=b"{}")
    aws.s3.put_object(Bucket=descriptor.results_bucket, Key=payload_ref_key("prov-routing", SESSION_ID), Body=b"{}")
    # THEN neither queue hears of them
    assert _drain(aws, descriptor.completion_queue_url) == []
    assert _drain(aws, provisioned.finisher_queue_url) == []


def test_descriptor_in_ssm_lets_a_trainer_find_the_local_experiment(
    aws: AwsClients, provisioned: ProvisionedExperiment, moto
) -> None:
    # GIVEN a provisioned experiment
    parameter = ExperimentResources.for_experiment("prov-routing").descriptor_parameter
    # WHEN its descriptor is read from SSM, as RolloutClient.for_experiment does
    stored = ExperimentDescriptor.model_validate_json(aws.ssm.get_parameter(Name=parameter)["Parameter"]["Value"])
    # THEN it names the local endpoints, queues, tables, runtime and gateway
    assert stored == provisioned.descriptor
    assert stored.endpoints["sqs"] == moto.url
    assert stored.endpoints["bedrock-agentcore"] == "http://127.0.0.1:1"
    assert stored.results_bucket == LOCAL_RESULTS_BUCKET
    assert stored.budget_table == BUDGET_TABLE.name
    assert stored.runtime_arn.startswith("arn:aws:bedrock-agentcore:us-east-1:000000000000:runtime/")
    assert stored.gateway_url == "http://127.0.0.1:2"


def test_queues_redrive_into_their_dead_letter_queues_as_the_contract_says(
    aws: AwsClients, provisioned: ProvisionedExperiment
) -> None:
    # GIVEN a provisioned experiment
    resources = ExperimentResources.for_experiment("prov-routing")
    for spec in (resources.dispatch_queue, resources.completion_queue, resources.finisher_queue):
        # WHEN each queue's attributes are read
        url = aws.sqs.get_queue_url(QueueName=spec.name)["QueueUrl"]
        attributes = aws.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        # THEN they follow its QueueSpec, with a redrive policy to its DLQ
        assert int(attributes["VisibilityTimeout"]) == spec.visibility_timeout_s
        assert int(attributes["MessageRetentionPeriod"]) == spec.retention_s
        redrive = json.loads(attributes["RedrivePolicy"])
        assert redrive["deadLetterTargetArn"].endswith(f":{spec.dlq_name}")
        assert int(redrive["maxReceiveCount"]) == spec.max_receive_count


def test_sessions_table_has_the_inflight_index_and_ttl(aws: AwsClients, provisioned: ProvisionedExperiment) -> None:
    # GIVEN a provisioned experiment
    table = provisioned.descriptor.sessions_table
    # WHEN the table is described
    description = aws.dynamodb.describe_table(TableName=table)["Table"]
    ttl = aws.dynamodb.describe_time_to_live(TableName=table)["TimeToLiveDescription"]
    # THEN it has the sparse in-flight index keyed by deadline, and TTL on the contract's attribute
    (index,) = description["GlobalSecondaryIndexes"]
    assert index["IndexName"] == INFLIGHT_INDEX.name
    assert [k["AttributeName"] for k in index["KeySchema"]] == [INFLIGHT_INDEX.partition_key, INFLIGHT_INDEX.sort_key]
    assert ttl["TimeToLiveStatus"] == "ENABLED"
    assert ttl["AttributeName"] == ExperimentResources.for_experiment("prov-routing").sessions_table.ttl_attribute
