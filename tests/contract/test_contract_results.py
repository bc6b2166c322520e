"""The result document: stored as ART stores it, read back as a dict with typed views, ART's own documents too."""

from __future__ import annotations

import json
import math

import pytest

from rollout_contract import (
    META_FIELD,
    REDACTED,
    STATUS_CODES,
    ErrorInfo,
    InvalidResultError,
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


def _round_trip(result: RolloutResult) -> RolloutResult:
    return RolloutResult.from_json_bytes(result.to_json_bytes())


def _art_document(**fields) -> dict:
    """What ART 0.2.0's ``save_result`` stores: the handler's dict plus its metadata, no ``status``."""
    return {"input_id": KEY.input_id, "s3_bucket": "bucket-1", "result_key": str(KEY), "payload": {}, **fields}


def test_handler_output_round_trips_as_a_dict_with_user_fields_and_art_defaults():
    result = _round_trip(_succeeded(rewards=[0.0, 1.0], response="#### 4"))

    assert isinstance(result, dict) and json.loads(json.dumps(result)) == result
    assert result.status is Status.SUCCEEDED and result.ok
    assert (result.status_code, result.stop_reason) == (200, "end_turn")
    assert result.result_key == str(KEY) and result.key == KEY
    assert result.user_fields == {"response": "#### 4"}
    assert result.timings.duration_s == 2.5
    assert result.field_errors == {}


def test_the_stored_document_is_arts_plus_one_key_of_ours():
    result = _succeeded(rewards=1.0, response="x")

    assert {k: v for k, v in result.items() if k != META_FIELD} == {
        "rewards": 1.0,
        "response": "x",
        "status_code": 200,
        "stop_reason": "end_turn",
        "input_id": KEY.input_id,
        "s3_bucket": "bucket-1",
        "result_key": str(KEY),
        "payload": {"p": 1},
    }


def test_the_handlers_own_status_error_timings_and_ids_are_stored_as_returned():
    """The collision rule: no key of the handler's is overwritten but ART's metadata (as ART overwrites it)."""
    mine = {"status": "timed_out", "error": "none", "timings": [1, 2], "session_id": "forged", "exp_id": "other"}

    result = _round_trip(_succeeded(rewards=1.0, stop_reason="max_turns", input_id="forged", **mine))

    assert {name: result[name] for name in mine} == mine
    assert result.status is Status.SUCCEEDED and result.error is None
    assert result.key == KEY and result["input_id"] == KEY.input_id  # ART overwrites input_id too
    assert result.stop_reason == "max_turns"
    assert result.timings.started_at == 1.0


def test_a_handler_that_returns_the_reserved_key_is_told_so_per_field():
    result = _succeeded(rewards=1.0, **{META_FIELD: "mine"})

    assert result.ok and result.reward == 1.0
    assert "reserved" in result.field_errors[META_FIELD]


@pytest.mark.parametrize(
    "rewards",
    [1, "0.5", True, {"a": 1.0}, [[1.0], [2.0]], [1.0, None], [None, 1.0], "high", [], None],
)
def test_rewards_are_stored_exactly_as_returned(rewards):
    result = _round_trip(_succeeded(rewards=rewards))

    assert result["rewards"] == rewards and type(result["rewards"]) is type(rewards)


@pytest.mark.parametrize(
    ("rewards", "reward"),
    [
        (1, 1.0),
        (0.25, 0.25),
        ([0.1, 0.7], 0.7),
        ("0.5", 0.5),
        (True, 1.0),
        ([None, 1.0], 1.0),
        ([], None),
        (None, None),
    ],
)
def test_reward_rule_is_arts_a_number_or_the_last_list_element(rewards, reward):
    result = _succeeded(rewards=rewards)

    assert result.reward == reward and "rewards" not in result.field_errors


@pytest.mark.parametrize(
    ("rewards", "what"),
    [
        ({"a": 1.0}, "rewards is an object"),
        ([[1.0], [2.0]], "rewards[0] is a list"),
        ([1.0, None], "rewards[1] is null"),
        ("high", "rewards is a string"),
        (["x", 1.0], "rewards[0] is a string"),
    ],
)
def test_a_reward_that_is_not_a_number_or_a_list_of_them_fails_the_rollout_naming_field_and_type(rewards, what):
    result = _round_trip(_succeeded(rewards=rewards))

    assert result.status is Status.AGENT_ERROR and result.reward is None
    assert result.error is not None and result.error.type == "InvalidReward"
    assert result.error.message.startswith(what) and what in result.field_errors["rewards"]
    assert result["rewards"] == rewards and result["status_code"] == 200  # the agent's document, as ART stores it


@pytest.mark.parametrize("rewards", [math.nan, math.inf, -math.inf, [0.5, math.nan], [math.nan, 1.0], "nan"])
def test_a_non_finite_reward_is_stored_as_art_stores_it_with_the_status_saying_so(rewards):
    result = _round_trip(_succeeded(rewards=rewards))

    assert json.dumps(result["rewards"]) == json.dumps(rewards)  # NaN stays NaN, never null
    assert result.status is Status.AGENT_ERROR and result.reward is None
    assert result.error is not None and result.error.type == "NonFiniteReward"
    assert result["status_code"] == 200  # what ART's readers see is what ART would have stored


@pytest.mark.parametrize(
    ("field", "value"), [("stop_reason", 7), ("stop_reason", ["a"]), ("status_code", "200"), ("payload", "p")]
)
def test_a_field_the_typed_views_cannot_read_is_named_not_fatal(field, value):
    document = _art_document(rewards=1.0, **{field: value})

    result = RolloutResult.from_json_bytes(json.dumps(document))

    assert result[field] == value and field in result.field_errors
    assert result.reward == 1.0


@pytest.mark.parametrize("status", [s for s in Status if s is not Status.SUCCEEDED])
def test_terminal_results_round_trip_with_their_status_code(status):
    error = ErrorInfo(type="X", message="went wrong")

    result = _round_trip(RolloutResult.terminal(status, key=KEY, s3_bucket="bucket-1", error=error))

    assert result.status is status
    assert result.status_code == STATUS_CODES[status]
    assert result.stop_reason == "went wrong"
    assert result.error == error
    assert not result.ok and result.reward is None


def test_an_agent_error_has_arts_top_level_traceback():
    try:
        raise ValueError("bad input")
    except ValueError as exc:
        error = ErrorInfo.from_exception(exc)

    result = _round_trip(RolloutResult.terminal(Status.AGENT_ERROR, key=KEY, s3_bucket="b", error=error))

    assert (result["status_code"], result["stop_reason"]) == (500, "bad input")
    assert result["traceback"] == error.traceback and result.error == error


def test_error_info_from_exception_carries_the_traceback():
    try:
        raise ValueError("bad input")
    except ValueError as exc:
        info = ErrorInfo.from_exception(exc)

    assert (info.type, info.message) == ("ValueError", "bad input")
    assert info.traceback is not None and 'raise ValueError("bad input")' in info.traceback


def test_an_art_success_reads_as_succeeded_with_its_ids_from_the_result_key():
    result = RolloutResult.from_json_bytes(json.dumps(_art_document(rewards=[0.0, 1.0], status_code=200)))

    assert result.status is Status.SUCCEEDED and result.reward == 1.0 and result.error is None
    assert result.key == KEY and result.timings == Timings()


def test_an_art_failure_reads_as_agent_error_with_its_message_type_and_traceback():
    trace = 'Traceback (most recent call last):\n  File "a.py", line 1\nbotocore.exceptions.ClientError: denied\n'
    document = _art_document(status_code=500, stop_reason="denied", traceback=trace)

    result = RolloutResult.from_json_bytes(json.dumps(document))

    assert result.status is Status.AGENT_ERROR
    assert result.error == ErrorInfo(type="ClientError", message="denied", traceback=trace)


@pytest.mark.parametrize(
    ("status_code", "status"),
    [(None, Status.SUCCEEDED), (200.0, Status.SUCCEEDED), (404, Status.AGENT_ERROR), ("200", Status.AGENT_ERROR)],
)
def test_arts_rule_decides_success_by_status_code_alone(status_code, status):
    fields = {} if status_code is None else {"status_code": status_code}

    assert RolloutResult.from_json_bytes(json.dumps(_art_document(**fields))).status is status


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (b"not json", "not JSON"),
        (b"[1]", "list"),
        (b'{"rewards": 1}', "no .* ids"),
        (b'{"result_key": "x.json"}', "ids"),
    ],
)
def test_an_object_that_is_not_a_result_is_refused_saying_why(body, match):
    with pytest.raises(InvalidResultError, match=match):
        RolloutResult.from_json_bytes(body)


def test_a_value_json_cannot_hold_fails_serialization_as_in_art():
    with pytest.raises(TypeError, match="not JSON serializable"):
        _succeeded(rewards=1.0, when=object()).to_json_bytes()


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


def test_a_malformed_key_of_ours_is_read_as_far_as_it_goes_and_named():
    # GIVEN a document whose _agentcore_rollouts was damaged (by hand, or by another writer)
    meta = {"status": "done", "timings": {"started_at": "soon"}, "field_errors": ["x"]}
    document = {**_art_document(rewards=1.0, status_code=200), META_FIELD: meta}

    # WHEN it is read THEN the status falls back to ART's fields and each damaged field is named
    result = RolloutResult.from_json_bytes(json.dumps(document))
    assert result.status is Status.SUCCEEDED and result.reward == 1.0 and result.timings == Timings()
    assert {f"{META_FIELD}.status", f"{META_FIELD}.timings"} <= result.field_errors.keys()
