"""The local stack's resources are the CDK app's: same queues, rule pattern and targets, table keys.

Both sides are built from ``rollout_contract.resources``; this test reads what each really created (moto's
API for the local side, the synthesized template for the CDK side) and compares them field by field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from aws_cdk import App
from aws_cdk.assertions import Template
from moto import mock_aws

from infra.app import build_experiment
from infra.settings import experiment_settings
from local_stack.moto_server import LOCAL_REGION
from local_stack.provision import AwsClients, provision_experiment, provision_shared
from local_stack.stack import runtime_arn
from rollout_contract.resources import ExperimentResources

pytestmark = pytest.mark.cdk

EXP = "parity"
NAMES = ExperimentResources.for_experiment(EXP)
QUEUES = (NAMES.dispatch_queue, NAMES.completion_queue, NAMES.finisher_queue)
BUCKET_PLACEHOLDER = "<results-bucket>"


@dataclass(frozen=True)
class Side:
    """What one deployment created, in comparable form."""

    queues: dict[str, dict[str, Any]]  # name -> visibility, retention, dlq name, max receives
    rule_pattern: dict[str, Any]
    rule_target_queues: set[str]
    tables: dict[str, dict[str, Any]]  # name -> key schema, indexes, ttl attribute


@pytest.fixture(scope="module")
def local() -> Side:
    with mock_aws():
        session = boto3.session.Session(region_name=LOCAL_REGION)
        clients = AwsClients(**{name: session.client(name) for name in ("s3", "sqs", "dynamodb", "events", "ssm")})
        provision_shared(clients)
        provision_experiment(clients, EXP, region=LOCAL_REGION, runtime_arn=runtime_arn(EXP), endpoints={})
        queues = {}
        for spec in QUEUES:
            url = clients.sqs.get_queue_url(QueueName=spec.name)["QueueUrl"]
            attributes = clients.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
            redrive = json.loads(attributes["RedrivePolicy"])
            queues[spec.name] = {
                "visibility": int(attributes["VisibilityTimeout"]),
                "retention": int(attributes["MessageRetentionPeriod"]),
                "dlq": redrive["deadLetterTargetArn"].rsplit(":", 1)[1],
                "max_receives": int(redrive["maxReceiveCount"]),
            }
        rule = clients.events.describe_rule(Name=NAMES.result_rule_name)
        pattern = json.loads(rule["EventPattern"])
        pattern["detail"]["bucket"]["name"] = [BUCKET_PLACEHOLDER]
        targets = clients.events.list_targets_by_rule(Rule=NAMES.result_rule_name)["Targets"]
        table = clients.dynamodb.describe_table(TableName=NAMES.sessions_table.name)["Table"]
        ttl = clients.dynamodb.describe_time_to_live(TableName=NAMES.sessions_table.name)["TimeToLiveDescription"]
        return Side(
            queues=queues,
            rule_pattern=pattern,
            rule_target_queues={target["Arn"].rsplit(":", 1)[1] for target in targets},
            tables={table["TableName"]: _table_shape(table, ttl["AttributeName"])},
        )


@pytest.fixture(scope="module")
def cdk() -> Side:
    app = App()
    stack = build_experiment(app, experiment_settings({"experiment": EXP, "image_tag": "v1"}))
    template = Template.from_stack(stack).to_json()["Resources"]
    by_id = {logical_id: resource for logical_id, resource in template.items()}
    queue_names = {
        logical_id: resource["Properties"]["QueueName"]
        for logical_id, resource in by_id.items()
        if resource["Type"] == "AWS::SQS::Queue"
    }
    queues = {}
    for resource in by_id.values():
        properties = resource["Properties"] if resource["Type"] == "AWS::SQS::Queue" else None
        if properties is None or "RedrivePolicy" not in properties:
            continue
        dlq_id = properties["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0]
        queues[properties["QueueName"]] = {
            "visibility": properties["VisibilityTimeout"],
            "retention": properties["MessageRetentionPeriod"],
            "dlq": queue_names[dlq_id],
            "max_receives": properties["RedrivePolicy"]["maxReceiveCount"],
        }
    (rule,) = (
        r["Properties"]
        for r in by_id.values()
        if r["Type"] == "AWS::Events::Rule" and "EventPattern" in r["Properties"]
    )
    pattern = json.loads(json.dumps(rule["EventPattern"]))
    pattern["detail"]["bucket"]["name"] = [BUCKET_PLACEHOLDER]
    tables = {
        r["Properties"]["TableName"]: _table_shape(
            r["Properties"], r["Properties"]["TimeToLiveSpecification"]["AttributeName"]
        )
        for r in by_id.values()
        if r["Type"] == "AWS::DynamoDB::Table"
    }
    return Side(
        queues=queues,
        rule_pattern=pattern,
        rule_target_queues={queue_names[t["Arn"]["Fn::GetAtt"][0]] for t in rule["Targets"]},
        tables=tables,
    )


def _table_shape(table: dict[str, Any], ttl_attribute: str) -> dict[str, Any]:
    """Key schema, index keys and TTL attribute of a table, from a DescribeTable answer or a template."""
    indexes = {
        index["IndexName"]: sorted((k["AttributeName"], k["KeyType"]) for k in index["KeySchema"])
        for index in table.get("GlobalSecondaryIndexes", [])
    }
    return {
        "keys": sorted((k["AttributeName"], k["KeyType"]) for k in table["KeySchema"]),
        "indexes": indexes,
        "ttl": ttl_attribute,
    }


def test_queues_have_the_same_timeouts_retention_and_dead_letter_policy(local: Side, cdk: Side) -> None:
    # GIVEN one experiment provisioned locally and synthesized by the CDK app
    # THEN its queues agree on every setting that changes behaviour
    assert set(local.queues) == {spec.name for spec in QUEUES}
    assert local.queues == cdk.queues


def test_the_result_rule_has_the_same_pattern_and_targets(local: Side, cdk: Side) -> None:
    # GIVEN / THEN the rule matches the same events (bucket aside, it is named per account) and feeds the same queues
    assert local.rule_pattern == cdk.rule_pattern
    assert (
        local.rule_target_queues == cdk.rule_target_queues == {NAMES.completion_queue.name, NAMES.finisher_queue.name}
    )


def test_the_sessions_table_has_the_same_keys_index_and_ttl(local: Side, cdk: Side) -> None:
    # GIVEN / THEN the sessions table has the same key schema, inflight index and TTL attribute
    assert local.tables == cdk.tables
