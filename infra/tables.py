"""DynamoDB tables built from the contract's ``TableSpec``: on-demand, PITR, TTL, its indexes."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct

from rollout_contract.resources import TableSpec


def contract_table(
    scope: Construct, construct_id: str, *, spec: TableSpec, removal_policy: RemovalPolicy
) -> dynamodb.Table:
    """A table shaped as ``spec`` says (string partition key; indexes with string/number keys, all attributes)."""
    table = dynamodb.Table(
        scope,
        construct_id,
        table_name=spec.name,
        partition_key=dynamodb.Attribute(name=spec.partition_key, type=dynamodb.AttributeType.STRING),
        billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
        time_to_live_attribute=spec.ttl_attribute,
        point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
            point_in_time_recovery_enabled=True
        ),
        removal_policy=removal_policy,
    )
    for index in spec.indexes:
        table.add_global_secondary_index(
            index_name=index.name,
            partition_key=dynamodb.Attribute(name=index.partition_key, type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name=index.sort_key, type=dynamodb.AttributeType.NUMBER),
            projection_type=dynamodb.ProjectionType.ALL,
        )
    return table
