"""An SQS queue with its dead-letter queue, shaped by a contract ``QueueSpec``."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from rollout_contract.resources import DLQ_RETENTION_S, QueueSpec


class RolloutQueue(Construct):
    """A queue named and shaped by ``spec`` (SSE-SQS, TLS only), redriving to ``<name>-dlq``."""

    def __init__(self, scope: Construct, construct_id: str, *, spec: QueueSpec) -> None:
        super().__init__(scope, construct_id)
        self.spec = spec
        self.dead_letter_queue = sqs.Queue(
            self,
            "DeadLetterQueue",
            queue_name=spec.dlq_name,
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=Duration.seconds(DLQ_RETENTION_S),
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.queue = sqs.Queue(
            self,
            "Queue",
            queue_name=spec.name,
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            visibility_timeout=Duration.seconds(spec.visibility_timeout_s),
            retention_period=Duration.seconds(spec.retention_s),
            dead_letter_queue=sqs.DeadLetterQueue(
                max_receive_count=spec.max_receive_count, queue=self.dead_letter_queue
            ),
            removal_policy=RemovalPolicy.DESTROY,
        )
