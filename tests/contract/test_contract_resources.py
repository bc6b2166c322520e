"""Resource definitions shared by the CDK app and the local stack."""

from __future__ import annotations

import pydantic
import pytest

from rollout_contract import InvalidIdError
from rollout_contract.resources import (
    QUEUE_LABELS,
    ExperimentResources,
    HandlerSettings,
    QueueSpec,
    result_event_pattern,
)


def test_every_resource_name_of_an_experiment_carries_its_id_and_two_experiments_never_collide() -> None:
    # GIVEN two experiments
    first, second = ExperimentResources.for_experiment("exp-a"), ExperimentResources.for_experiment("exp-b")

    # WHEN their names are listed
    def names(r: ExperimentResources) -> set[str]:
        queues = r.queues.values()
        return {
            *(q.name for q in queues),
            *(q.dlq_name for q in queues),
            r.sessions_table.name,
            r.result_rule_name,
            r.descriptor_parameter,
            r.stack_name,
            r.runtime_name,
        }

    # THEN each name is distinct within an experiment and across the two
    assert len(names(first)) == 11 and not names(first) & names(second)


def test_every_queue_of_an_experiment_has_a_label_that_names_its_field() -> None:
    # GIVEN an experiment's resources
    resources = ExperimentResources.for_experiment("exp-a")

    # WHEN its queues are listed by label and by field
    fields = {name: value for name, value in resources._asdict().items() if isinstance(value, QueueSpec)}

    # THEN every queue (so every dead-letter queue the alarms and the dashboard watch) is labelled, by its field's name
    assert {f"{label}_queue": spec for label, spec in resources.queues.items()} == fields
    assert tuple(resources.queues) == QUEUE_LABELS


def test_an_invalid_experiment_id_names_no_resources() -> None:
    # GIVEN / WHEN / THEN an id that cannot name AWS resources is refused with the rule
    with pytest.raises(InvalidIdError, match="lowercase letters"):
        ExperimentResources.for_experiment("Exp_A")


def test_a_dead_letter_queue_url_is_derived_from_its_queue_url() -> None:
    # GIVEN the dispatch queue's URL in AWS and locally
    spec = ExperimentResources.for_experiment("exp-a").dispatch_queue
    aws = f"https://sqs.us-east-1.amazonaws.com/123456789012/{spec.name}"
    local = f"http://127.0.0.1:5000/000000000000/{spec.name}"
    # WHEN / THEN the DLQ lives beside it, and another queue's URL is refused
    assert spec.dlq_url(aws) == f"https://sqs.us-east-1.amazonaws.com/123456789012/{spec.dlq_name}"
    assert spec.dlq_url(local) == f"http://127.0.0.1:5000/000000000000/{spec.dlq_name}"
    with pytest.raises(ValueError, match="is not the URL of queue"):
        spec.dlq_url("https://sqs.us-east-1.amazonaws.com/123456789012/other")


def test_handler_settings_round_trip_through_the_environment_and_name_what_is_missing() -> None:
    # GIVEN settings as the CDK app and the local worker write them
    settings = HandlerSettings(
        exp_id="exp-a", results_bucket="b", sessions_table="t", budget_table="bt",
        runtime_arn="arn:aws:bedrock-agentcore:us-east-1:1:runtime/r", dispatch_queue_url="u", tps_limit=10,
    )  # fmt: skip
    env = settings.to_env()
    # WHEN a Lambda reads them back THEN they are equal
    assert HandlerSettings.from_env(env) == settings
    # AND a missing variable is named in the error
    del env["ROLLOUTS_RUNTIME_ARN"]
    with pytest.raises(pydantic.ValidationError, match="runtime_arn"):
        HandlerSettings.from_env(env)


def test_the_result_rule_matches_only_the_experiments_prefix_in_its_bucket() -> None:
    # GIVEN / WHEN the pattern of experiment exp-a / THEN it filters on source, type, bucket and prefix
    assert result_event_pattern("bucket-1", "exp-a") == {
        "source": ["aws.s3"],
        "detail-type": ["Object Created"],
        "detail": {"bucket": {"name": ["bucket-1"]}, "object": {"key": [{"prefix": "exp-a/"}]}},
    }


def test_completion_events_no_trainer_reads_expire_within_the_hour():
    # GIVEN an experiment whose results only ART's own client reads (it reads no event; D93)
    resources = ExperimentResources.for_experiment("art-only")
    # THEN its result events leave the completion queue within an hour, not after 7 days
    assert resources.completion_queue.retention_s == 3600
