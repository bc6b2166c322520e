"""The result document: construction, round trips, the reward rule and redaction."""

from __future__ import annotations

import pytest

from rollout_contract import (
    REDACTED,
    STATUS_CODES,
    ErrorInfo,
    ResultKey,
    RolloutResult,
    Status,
    Timings,
    redact_payload,
)

KEY = ResultKey("exp-1", "q-1", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")


def _succeeded(**output) -> RolloutResult:
    return RolloutResult.from_handler_output(
        output, key=KEY, s3_bucket="bucket-1", payload={"p": 1}, timings=Timings(started_at=1.0, finished_at=3.5)
    )


def test_handler_output_round_trips_with_user_fields_and_art_defaults():
    result = _succeeded(rewards=[0.0, 1.0], response="#### 4")

    restored = RolloutResult.from_json_bytes(result.to_json_bytes())

    assert restored == result
    assert restored.status is Status.SUCCEEDED and restored.ok
    assert (restored.status_code, restored.stop_reason) == (200, "end_turn")
    assert restored.result_key == str(KEY) and restored.key == KEY
    assert restored.user_fields == {"response": "#### 4"}
    assert restored.timings.duration_s == 2.5


def test_handler_cannot_overwrite_contract_fields_but_keeps_its_stop_reason():
    result = _succeeded(rewards=1.0, status="timed_out", session_id="forged", stop_reason="max_turns")

    assert result.status is Status.SUCCEEDED
    assert result.session_id == KEY.session_id
    assert result.stop_reason == "max_turns"


@pytest.mark.parametrize(("rewards", "reward"), [(1, 1.0), (0.25, 0.25), ([0.1, 0.7], 0.7), ([], None), (None, None)])
def test_reward_rule_takes_a_number_or_the_last_list_element(rewards, reward):
    assert _succeeded(rewards=rewards).reward == reward


@pytest.mark.parametrize("status", [s for s in Status if s is not Status.SUCCEEDED])
def test_terminal_results_round_trip_with_their_status_code(status):
    error = ErrorInfo(type="X", message="went wrong")

    result = RolloutResult.terminal(status, key=KEY, s3_bucket="bucket-1", error=error)
    restored = RolloutResult.from_json_bytes(result.to_json_bytes())

    assert restored.status is status
    assert restored.status_code == STATUS_CODES[status]
    assert restored.stop_reason == "went wrong"
    assert restored.error == error
    assert not restored.ok and restored.reward is None


def test_error_info_from_exception_carries_the_traceback():
    try:
        raise ValueError("bad input")
    except ValueError as exc:
        info = ErrorInfo.from_exception(exc)

    assert (info.type, info.message) == ("ValueError", "bad input")
    assert 'raise ValueError("bad input")' in info.traceback


def test_invalid_status_is_rejected_naming_the_field():
    document = _succeeded(rewards=1.0).model_dump(mode="json") | {"status": "done"}

    with pytest.raises(ValueError, match="status"):
        RolloutResult.model_validate(document)


def test_redaction_always_hides_api_key_and_named_keys_at_any_depth_without_touching_the_input():
    payload = {"_rollout": {"api_key": "sk", "model_id": "m"}, "a": [{"token": "t"}], "token": "u", "keep": 1}

    redacted = redact_payload(payload, extra_keys=["token"])

    assert redacted == {
        "_rollout": {"api_key": REDACTED, "model_id": "m"},
        "a": [{"token": REDACTED}],
        "token": REDACTED,
        "keep": 1,
    }
    assert payload["_rollout"]["api_key"] == "sk"
