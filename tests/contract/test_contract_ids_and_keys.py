"""Ids and the result key layout."""

from __future__ import annotations

import pytest

from rollout_contract import (
    InvalidIdError,
    ResultKey,
    experiment_prefix,
    is_result_key,
    join_exp_id,
    new_session_id,
    parse_result_key,
    payload_ref_key,
    result_key,
    split_exp_id,
    validate_exp_id,
    validate_experiment,
)
from rollout_contract.ids import EXP_ID_MAX_LENGTH, INPUT_ID_MAX_LENGTH, S3_KEY_MAX_LENGTH, SESSION_ID_MAX_LENGTH
from rollout_contract.naming import EXPERIMENT_MAX_LENGTH

SESSION = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"


def test_result_key_round_trips_through_the_parser():
    key = result_key("gsm8k-grpo-1", "q-17", SESSION)

    assert key == f"gsm8k-grpo-1/q-17/{SESSION}.json"
    assert parse_result_key(key) == ResultKey("gsm8k-grpo-1", "q-17", SESSION)
    assert str(parse_result_key(key)) == key


def test_new_session_ids_are_valid_and_distinct():
    first, second = new_session_id(), new_session_id()

    assert first != second
    assert result_key("e", "i", first).endswith(f"/{first}.json")


@pytest.mark.parametrize(
    ("exp_id", "input_id", "session_id", "hint"),
    [
        ("Upper", "q", SESSION, "lowercase letters"),
        ("-lead", "q", SESSION, "lowercase letters"),
        ("x" * 38, "q", SESSION, "1-37"),
        ("gsm8k_eval/run", "q", SESSION, "must start with an experiment name"),
        ("exp//run", "q", SESSION, "no empty part"),
        ("exp/run/", "q", SESSION, "no empty part"),
        ("exp/r un", "q", SESSION, "'/' only between parts"),
        ("exp", "a/b", SESSION, "use only letters"),
        ("exp", "", SESSION, "non-empty"),
        ("exp", "q", "short", "33-256"),
        ("exp", "q", "s" * 30 + "/" + "s" * 10, "use only letters"),
    ],
)
def test_invalid_ids_are_rejected_with_a_message_saying_what_to_do(exp_id, input_id, session_id, hint):
    with pytest.raises(InvalidIdError, match=hint):
        result_key(exp_id, input_id, session_id)


@pytest.mark.parametrize(
    "key",
    [
        f"exp/q/{SESSION}.txt",
        f"exp/{SESSION}.json",
        f"A/exp/q/{SESSION}.json",
        f"_payloads/exp/{SESSION}.json",
        f"_payloads/exp/run/{SESSION}.json",
        f"/exp/q/{SESSION}.json",
    ],
)
def test_keys_outside_the_layout_are_not_result_keys(key):
    assert not is_result_key(key)
    with pytest.raises(InvalidIdError):
        parse_result_key(key)


def test_payload_refs_live_outside_the_experiment_prefix():
    ref = payload_ref_key("exp-1", SESSION)

    assert not ref.startswith(experiment_prefix("exp-1"))
    assert not is_result_key(ref)


# --- runs: exp_id = experiment/run -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exp_id", "experiment", "run"),
    [
        ("gsm8k", "gsm8k", None),
        ("runs/qwen3_gsm8k", "runs", "qwen3_gsm8k"),  # ART 0.2.0's AgentCoreS3Session: <prefix>/<experiment>
        ("gsm8k-grpo-1/2024-06-01/lr~3e-6", "gsm8k-grpo-1", "2024-06-01/lr~3e-6"),
    ],
)
def test_a_run_key_parses_from_the_right_into_experiment_run_input_and_session(exp_id, experiment, run):
    # GIVEN a result key of a run (the run may hold '/' between parts)
    key = result_key(exp_id, "q-17", SESSION)
    # WHEN it is parsed
    parsed = parse_result_key(key)
    # THEN the ids come back whole, the experiment is the first part and the run the rest
    assert parsed == ResultKey(exp_id, "q-17", SESSION)
    assert parsed.experiment == experiment
    assert split_exp_id(exp_id) == (experiment, run)
    assert join_exp_id(experiment, run) == exp_id
    # AND the experiment's rule prefix covers every run's keys
    assert key.startswith(experiment_prefix(experiment))


def test_the_agent_accepts_any_key_safe_label_as_art_does_but_the_pipeline_wants_an_experiment_first():
    # ART's own defaults: evaluate.py's 'gsm8k_eval', AgentCoreS3Session's 'runs/qwen3_gsm8k'
    assert validate_exp_id("gsm8k_eval") == "gsm8k_eval"
    assert validate_exp_id("runs/qwen3_gsm8k") == "runs/qwen3_gsm8k"
    with pytest.raises(InvalidIdError, match="'qwen3_gsm8k' can be the run: experiment/run"):
        split_exp_id("gsm8k_eval")


def test_an_exp_id_with_a_run_is_not_an_experiment_name_and_the_error_says_how_to_give_both():
    with pytest.raises(InvalidIdError, match=r"for_experiment\('demo', run='r1'\)"):
        validate_experiment("demo/r1")


def test_the_longest_ids_still_make_a_key_s3_accepts():
    # GIVEN the longest experiment, run, input and session ids
    exp_id = join_exp_id("e" * EXPERIMENT_MAX_LENGTH, "r" * (EXP_ID_MAX_LENGTH - EXPERIMENT_MAX_LENGTH - 1))
    key = result_key(exp_id, "i" * INPUT_ID_MAX_LENGTH, "s" * SESSION_ID_MAX_LENGTH)
    # THEN the key is exactly S3's limit, and one more character of run is refused
    assert len(key) == S3_KEY_MAX_LENGTH
    with pytest.raises(InvalidIdError, match="limit"):
        join_exp_id("e" * EXPERIMENT_MAX_LENGTH, "r" * (EXP_ID_MAX_LENGTH - EXPERIMENT_MAX_LENGTH))
