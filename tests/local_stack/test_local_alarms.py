"""The local stack's alarms: created from the CDK app's definitions and evaluated as CloudWatch would."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from moto import mock_aws

from local_stack.alarms import LocalAlarms, state_of
from rollout_contract import monitoring as spec
from rollout_contract.metrics import alarm_name_prefix
from rollout_contract.resources import ExperimentDescriptor, ExperimentResources
from trainer_client._dashboard import monitored

EXP = "exp-alarms"
NOW = 1_800_000_030.0  # 30 s into a minute
MINUTE = NOW - NOW % 60


def alarm(name: str) -> spec.Alarm:
    [found] = [a for a in spec.alarms(_monitored()) if a.name == name]
    return found


def _monitored() -> spec.Monitored:
    return monitored(descriptor())


def descriptor() -> ExperimentDescriptor:
    resources = ExperimentResources.for_experiment(EXP)
    return ExperimentDescriptor(
        exp_id=EXP,
        region="us-east-1",
        results_bucket="results",
        dispatch_queue_url=f"https://sqs.us-east-1.amazonaws.com/123456789012/{resources.dispatch_queue.name}",
        completion_queue_url=f"https://sqs.us-east-1.amazonaws.com/123456789012/{resources.completion_queue.name}",
        sessions_table=resources.sessions_table.name,
        budget_table="budgets",
        runtime_arn="arn:aws:bedrock-agentcore:us-east-1:123456789012:runtime/agent-abc",
        function_names={"dispatcher": "d", "finisher": "f", "sweeper": "s"},
        tps_limit=25.0,
        session_budget=10,
    )


def test_a_dead_letter_alarm_fires_on_one_message_and_treats_no_data_as_fine():
    dlq = alarm("DeadLetters-dispatch")
    assert state_of(dlq, {MINUTE + 5: 1.0}, now=NOW, created_at=0) == "ALARM"
    assert state_of(dlq, {MINUTE: 0.0}, now=NOW, created_at=0) == "OK"
    assert state_of(dlq, {}, now=NOW, created_at=0) == "OK"


def test_stuck_rollouts_counts_missing_data_as_breaching_but_not_before_the_alarm_existed():
    stuck = alarm("StuckRollouts")  # > 0 for 3 of 3 minutes, missing data breaching
    assert state_of(stuck, {}, now=NOW, created_at=0) == "ALARM"  # the sweeper stopped publishing
    assert state_of(stuck, {}, now=NOW, created_at=NOW - 5) == "OK"  # just created: one period, not three
    assert state_of(stuck, {MINUTE - 120: 2, MINUTE - 60: 1, MINUTE: 0}, now=NOW, created_at=0) == "OK"
    assert state_of(stuck, {MINUTE - 120: 2, MINUTE - 60: 1, MINUTE: 3}, now=NOW, created_at=0) == "ALARM"


def test_sustained_throttling_needs_every_one_of_its_ten_minutes():
    throttling = alarm("SustainedThrottling")
    ten = {MINUTE - 60 * back: 4.0 for back in range(10)}
    assert state_of(throttling, ten, now=NOW, created_at=0) == "ALARM"
    assert state_of(throttling, {**ten, MINUTE - 300: 0.0}, now=NOW, created_at=0) == "OK"


def test_the_alarms_are_created_and_their_states_set_from_the_local_metrics(boto_session, monkeypatch):
    # GIVEN the experiment's alarms created in (in-process) moto, and one message in the dispatch dead-letter queue
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        cloudwatch = boto_session.client("cloudwatch")
        alarms = LocalAlarms(cloudwatch, descriptor())
        alarms.create()
        dlq = ExperimentResources.for_experiment(EXP).dispatch_queue.dlq_name
        cloudwatch.put_metric_data(
            Namespace=spec.SQS,
            MetricData=[
                {
                    "MetricName": "ApproximateNumberOfMessagesVisible",
                    "Dimensions": [{"Name": "QueueName", "Value": dlq}],
                    "Timestamp": datetime.now(UTC),
                    "Value": 1.0,
                }
            ],
        )

        # WHEN they are evaluated
        states = alarms.evaluate(time.time())

        # THEN the dead-letter alarm is in ALARM, every other OK, and CloudWatch says so
        prefix = alarm_name_prefix(EXP)
        stored = {
            a["AlarmName"].removeprefix(prefix): a["StateValue"]
            for a in cloudwatch.describe_alarms(AlarmNamePrefix=prefix)["MetricAlarms"]
        }
    assert stored == {name.removeprefix(prefix): state for name, state in states.items()}
    assert {name for name, state in stored.items() if state == "ALARM"} == {"DeadLetters-dispatch"}
    assert len(stored) == len(spec.alarms(_monitored())) == 8
