"""Parsing and validation of the CDK context flags (no synth: pure functions)."""

from __future__ import annotations

import re

import pytest

from infra.settings import (
    ContextError,
    ImageDirectory,
    ImageTag,
    VpcPlacement,
    experiment_settings,
)
from rollout_contract.keys import experiment_prefix, payload_ref_key, payload_ref_prefix
from rollout_contract.naming import EXPERIMENT_MAX_LENGTH
from rollout_contract.proof import UnprovenResults
from rollout_contract.protocol import DEFAULT_IDLE_TIMEOUT_S, DEFAULT_MAX_LIFETIME_S
from rollout_contract.resources import ExperimentResources


def test_missing_experiment_flag_names_the_flag() -> None:
    # GIVEN a context without -c experiment
    context = {"image_tag": "v1"}
    # WHEN the settings are built THEN the error names the flag to add
    with pytest.raises(ContextError, match=r"missing -c experiment=NAME"):
        experiment_settings(context)


def test_invalid_experiment_name_says_which_flag_and_rule() -> None:
    # GIVEN an experiment name that cannot name AWS resources
    # WHEN / THEN the error names the flag and the id rule
    with pytest.raises(ContextError, match=r"-c experiment: experiment 'Bad_Name' is invalid"):
        experiment_settings({"experiment": "Bad_Name"})


def test_defaults_give_a_public_runtime_on_the_named_tag() -> None:
    # GIVEN the experiment name and its image tag
    # WHEN the settings are built
    settings = experiment_settings({"experiment": "demo", "image_tag": "v1"})
    # THEN the image is that tag, the network public, the lifecycle ACR's defaults
    assert settings.image == ImageTag(tag="v1")
    assert settings.vpc is None
    assert (settings.idle_timeout_s, settings.max_lifetime_s) == (DEFAULT_IDLE_TIMEOUT_S, DEFAULT_MAX_LIFETIME_S)
    assert settings.dispatcher_reserved_concurrency is None


def test_agent_dir_builds_the_image_from_a_directory() -> None:
    # GIVEN -c agent_dir
    settings = experiment_settings({"experiment": "demo", "agent_dir": "examples/math_agent"})
    # THEN the image is built from that directory
    assert settings.image == ImageDirectory(path="examples/math_agent")


def test_image_tag_and_agent_dir_together_are_rejected() -> None:
    # GIVEN both image flags WHEN / THEN the error asks for one of them
    with pytest.raises(ContextError, match=r"-c image_tag and -c agent_dir are both set"):
        experiment_settings({"experiment": "demo", "image_tag": "v1", "agent_dir": "agent"})


def test_vpc_mode_needs_all_three_flags() -> None:
    # GIVEN a VPC id without subnets or security groups
    # WHEN / THEN the error lists the missing flags
    with pytest.raises(ContextError, match=r"missing -c subnet_ids=\.\.\., -c security_group_ids=\.\.\."):
        experiment_settings({"experiment": "demo", "image_tag": "v1", "vpc_id": "vpc-0abc1234def567890"})


def test_vpc_mode_parses_comma_separated_ids() -> None:
    # GIVEN the three VPC flags
    context = {
        "experiment": "demo",
        "image_tag": "v1",
        "vpc_id": "vpc-0abc1234def567890",
        "subnet_ids": "subnet-0abc1234def567890, subnet-1abc1234def567890",
        "security_group_ids": "sg-0abc1234def567890",
    }
    # WHEN the settings are built THEN the placement holds every id
    assert experiment_settings(context).vpc == VpcPlacement(
        vpc_id="vpc-0abc1234def567890",
        subnet_ids=("subnet-0abc1234def567890", "subnet-1abc1234def567890"),
        security_group_ids=("sg-0abc1234def567890",),
    )


def test_malformed_subnet_id_is_rejected_with_an_example() -> None:
    # GIVEN a subnet id CloudFormation would refuse
    context = {"experiment": "demo", "image_tag": "v1", "vpc_id": "vpc-0abc1234def567890", "subnet_ids": "subnet-a"}
    context["security_group_ids"] = "sg-0abc1234def567890"
    # WHEN / THEN the error names the flag, the bad id and the expected shape
    with pytest.raises(ContextError, match=r"-c subnet_ids has malformed ids \['subnet-a'\].*subnet-0abc"):
        experiment_settings(context)


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("idle_timeout_s", "30", r"-c idle_timeout_s=30 is out of range"),
        ("max_lifetime_s", "eight hours", r"-c max_lifetime_s='eight hours' is not an integer"),
        ("dispatcher_max_concurrency", "1", r"-c dispatcher_max_concurrency=1 is out of range"),
        ("tps_limit", "-1", r"-c tps_limit=-1.0 must be positive"),
        ("agent_env", "[1]", r"-c agent_env must be a JSON object of strings"),
        ("agent_env", "{", r"-c agent_env is not JSON"),
        ("session_budget", "0", r"-c session_budget=0 is out of range; give a whole number from 1 to 100000"),
        ("dispatcher_reserved_concurrency", "many", r"'many' is not an integer; give a whole number from 1 to 10000"),
        ("tps_limit", "fast", r"-c tps_limit='fast' is not a number; give a positive number"),
        ("sandbox", "yes", r"-c sandbox='yes' is not a boolean; give true or false"),
        ("endpoints", "11", r"-c endpoints=11 is out of range; give a whole number from 1 to 10"),
    ],
)
def test_bad_values_name_their_flag(flag: str, value: str, message: str) -> None:
    # GIVEN one malformed flag WHEN / THEN the error names it
    with pytest.raises(ContextError, match=message):
        experiment_settings({"experiment": "demo", "image_tag": "v1", flag: value})


def test_idle_timeout_longer_than_lifetime_is_rejected() -> None:
    # GIVEN an idle timeout beyond the max lifetime WHEN / THEN the error names both flags
    with pytest.raises(ContextError, match=r"-c idle_timeout_s=3600 exceeds -c max_lifetime_s=600"):
        experiment_settings(
            {"experiment": "demo", "image_tag": "v1", "idle_timeout_s": "3600", "max_lifetime_s": "600"}
        )


def test_runtime_name_fits_acr_rules_for_the_longest_experiment_id() -> None:
    # GIVEN the longest valid experiment id, with hyphens
    exp_id = "a-" * (EXPERIMENT_MAX_LENGTH // 2 - 1) + "ab"
    # WHEN its runtime name is derived
    name = ExperimentResources.for_experiment(exp_id).runtime_name
    # THEN it matches ACR's runtime name rule: a letter, then letters, digits or underscores, 48 at most
    assert re.fullmatch(r"[a-zA-Z][a-zA-Z0-9_]{0,47}", name)


def test_payload_refs_live_under_their_own_prefix_outside_the_result_prefix() -> None:
    # GIVEN an experiment WHEN a payload key and the prefixes are derived
    key = payload_ref_key("demo", "0" * 36)
    # THEN the key sits under payload_ref_prefix, which never starts with the result prefix
    assert key.startswith(payload_ref_prefix("demo"))
    assert not payload_ref_prefix("demo").startswith(experiment_prefix("demo"))


def test_first_writer_wins_is_on_unless_turned_off_and_only_true_or_false_is_taken() -> None:
    base = {"experiment": "alpha", "image_tag": "v1"}
    assert experiment_settings(base).first_writer_wins
    assert not experiment_settings({**base, "first_writer_wins": "false"}).first_writer_wins
    with pytest.raises(ContextError, match="first_writer_wins='maybe' is not a boolean"):
        experiment_settings({**base, "first_writer_wins": "maybe"})


def test_unproven_results_are_refused_unless_accepted_and_only_reject_or_accept_is_taken() -> None:
    base = {"experiment": "alpha", "image_tag": "v1"}
    assert experiment_settings(base).unproven_results is UnprovenResults.REJECT
    assert experiment_settings({**base, "unproven_results": "accept"}).unproven_results is UnprovenResults.ACCEPT
    with pytest.raises(ContextError, match="unproven_results='yes' is not one of reject, accept; give accept for"):
        experiment_settings({**base, "unproven_results": "yes"})


def test_the_model_name_and_the_fields_the_agent_needs_are_read_from_context() -> None:
    context = {"experiment": "demo", "model_id": "qwen3-8b", "required_rollout_fields": "model_id, base_url"}
    settings = experiment_settings(context)
    assert (settings.model_id, settings.required_rollout_fields) == ("qwen3-8b", ("model_id", "base_url"))
    assert experiment_settings({"experiment": "demo"}).required_rollout_fields == ()
    with pytest.raises(ContextError, match=r"-c required_rollout_fields='model-id': model-id is not a _rollout field"):
        experiment_settings({"experiment": "demo", "required_rollout_fields": "model-id"})


def test_alarm_topic_arn_is_read_and_a_malformed_one_is_refused_with_an_example() -> None:
    # GIVEN an SNS topic ARN WHEN the settings are built THEN it is kept as given
    arn = "arn:aws:sns:us-west-2:123456789012:rollout-alarms"
    base = {"experiment": "exp", "image_tag": "v1"}
    assert experiment_settings({**base, "alarm_topic_arn": arn}).alarm_topic_arn == arn
    assert experiment_settings(base).alarm_topic_arn is None
    # AND a topic name or a queue ARN is refused, naming the flag and an example
    for bad in ("rollout-alarms", "arn:aws:sqs:us-west-2:123456789012:q"):
        with pytest.raises(
            ContextError, match=r"-c alarm_topic_arn=.* is not an SNS topic ARN; expected e\.g\. arn:aws:sns:"
        ):
            experiment_settings({**base, "alarm_topic_arn": bad})
