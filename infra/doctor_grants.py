"""The read-only calls ``rollouts doctor`` makes, granted to the trainer role.

Kept apart from the trainer's run-time grants so the doctor's needs read as one list: describe/get calls
only, each on this experiment's resource where IAM allows a resource.
"""

from __future__ import annotations

from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sqs as sqs

from infra.nag import acknowledge

GET_METRIC_DATA = "cloudwatch:GetMetricData"
#: Service Quotas' reads of the account's AgentCore quotas (``trainer_client.quotas``): they take no resource.
READ_QUOTAS = ("servicequotas:ListAWSDefaultServiceQuotas", "servicequotas:ListServiceQuotas")


def grant_doctor_reads(
    policy: iam.Policy,
    *,
    queues: list[sqs.IQueue],
    bucket: s3.IBucket,
    result_rule: events.IRule,
    runtime_arn: str,
) -> None:
    """Let ``policy``'s holders run ``rollouts doctor``: queue attributes, the bucket's notification switch,
    the result rule and its targets, the runtime's status, the functions' metrics and the account's AgentCore
    quotas."""
    policy.add_statements(
        iam.PolicyStatement(
            sid="DoctorReadQueues",
            actions=["sqs:GetQueueAttributes", "sqs:GetQueueUrl"],
            resources=[queue.queue_arn for queue in queues],
        ),
        iam.PolicyStatement(
            sid="DoctorReadBucketEvents", actions=["s3:GetBucketNotification"], resources=[bucket.bucket_arn]
        ),
        iam.PolicyStatement(
            sid="DoctorReadResultRule",
            actions=["events:DescribeRule", "events:ListTargetsByRule"],
            resources=[result_rule.rule_arn],
        ),
        iam.PolicyStatement(
            sid="DoctorReadRuntime", actions=["bedrock-agentcore:GetAgentRuntime"], resources=[runtime_arn]
        ),
        iam.PolicyStatement(sid="DoctorReadFunctionMetrics", actions=[GET_METRIC_DATA], resources=["*"]),
        iam.PolicyStatement(sid="DoctorReadQuotas", actions=list(READ_QUOTAS), resources=["*"]),
    )
    acknowledge(
        policy,
        "AwsSolutions-IAM5[Resource::*]",
        f"{GET_METRIC_DATA} and {', '.join(READ_QUOTAS)} take no resource (the doctor reads this experiment's "
        "functions' AWS/Lambda metrics and the account's AgentCore quotas).",
    )
