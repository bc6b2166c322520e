"""The result rule: result objects of one experiment -> its completion and finisher queues."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from constructs import Construct

from infra.queues import RolloutQueue
from rollout_contract.resources import result_event_pattern

#: EventBridge's maxima: deliveries to a target queue are retried for a day before going to its DLQ.
TARGET_RETRY_ATTEMPTS = 185
TARGET_MAX_EVENT_AGE = Duration.hours(24)


class ResultRouting(Construct):
    """An EventBridge rule on the bucket's "Object Created" events under the experiment's prefix.

    Each target queue's dead-letter queue also catches the events EventBridge could not deliver.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        exp_id: str,
        rule_name: str,
        bucket_name: str,
        inboxes: list[RolloutQueue],
    ) -> None:
        super().__init__(scope, construct_id)
        pattern = result_event_pattern(bucket_name, exp_id)
        self.rule = events.Rule(
            self,
            "Rule",
            rule_name=rule_name,
            description=f"Result objects of experiment {exp_id} -> completion and finisher queues",
            event_pattern=events.EventPattern(
                source=pattern["source"], detail_type=pattern["detail-type"], detail=pattern["detail"]
            ),
        )
        for inbox in inboxes:
            self.rule.add_target(
                targets.SqsQueue(
                    inbox.queue,
                    dead_letter_queue=inbox.dead_letter_queue,
                    retry_attempts=TARGET_RETRY_ATTEMPTS,
                    max_event_age=TARGET_MAX_EVENT_AGE,
                )
            )
