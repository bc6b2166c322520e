"""Ids and the result key layout."""

from __future__ import annotations

import pytest

from rollout_contract import (
    InvalidIdError,
    ResultKey,
    experiment_prefix,
    is_result_key,
    new_session_id,
    parse_result_key,
    payload_ref_key,
    result_key,
)

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
    [f"exp/q/{SESSION}.txt", f"exp/{SESSION}.json", f"a/exp/q/{SESSION}.json", f"_payloads/exp/{SESSION}.json"],
)
def test_keys_outside_the_layout_are_not_result_keys(key):
    assert not is_result_key(key)
    with pytest.raises(InvalidIdError):
        parse_result_key(key)


def test_payload_refs_live_outside_the_experiment_prefix():
    ref = payload_ref_key("exp-1", SESSION)

    assert not ref.startswith(experiment_prefix("exp-1"))
    assert not is_result_key(ref)
