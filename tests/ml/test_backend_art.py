"""The ART session's conversions against agentcore-rl-toolkit 0.2.0's real protocol, dump and factory.

Running rollouts through ART's ``make_session`` on the local stack: ``test_backends_e2e.py``.
"""

from __future__ import annotations

import pytest

pytest.importorskip("agentcore_rl_toolkit")

from agentcore_rl_toolkit.aws_tools.persistent_dict import NullPersister, PersistentDict  # noqa: E402
from agentcore_rl_toolkit.rollout_session.agentcore_s3_session import to_dump as art_s3_to_dump  # noqa: E402
from agentcore_rl_toolkit.rollout_session.errors import RolloutContractError  # noqa: E402
from agentcore_rl_toolkit.rollout_session.factory import make_session, resolve_backend  # noqa: E402
from agentcore_rl_toolkit.rollout_session.lifecycle import RolloutSession  # noqa: E402

from rollout_contract import ErrorInfo, ResultKey, Status, Timings  # noqa: E402
from trainer_client import ClientResult  # noqa: E402
from trainer_client.backends import art  # noqa: E402

BACKEND = "trainer_client.backends.art.AgentCoreEventsSession"
KEY = ResultKey("exp", "group-1", "s" * 36)


def _succeeded(**fields: object) -> ClientResult:
    return ClientResult.from_handler_output(fields, key=KEY, s3_bucket="b", payload=None, timings=Timings())


def test_arts_factory_resolves_our_dotted_path_to_a_rollout_session_class():
    cls = resolve_backend(BACKEND)
    assert cls is art.AgentCoreEventsSession and issubclass(cls, RolloutSession)


@pytest.mark.parametrize(
    ("cfg", "match"),
    [({"backend": BACKEND}, "experiment"), ({"backend": BACKEND, "experiment": "e", "bucket": "b"}, "bucket")],
)
def test_arts_factory_refuses_missing_and_unknown_keys(cfg, match):
    state = PersistentDict({}, persister=NullPersister())
    with pytest.raises(TypeError, match=match):
        make_session("s" * 36, cfg, state)


def test_a_succeeded_result_is_a_successful_dump_with_the_reward_arts_loops_read():
    dump = art.to_dump(_succeeded(rewards=[0.0, 0.75], metrics={"turns": 3, "ok": True, "note": "x"}))
    assert dump.is_successful() and dump.reward == 0.75
    # ART's verl and slime loops read task_output["reward"]; its experimental loop reads dump.reward
    assert dump.task_output["reward"] == 0.75 and dump.task_output["rewards"] == [0.0, 0.75]
    assert dump.metrics == {"turns": 3.0}


def test_an_agent_that_reports_reward_as_arts_http_agents_do_keeps_it():
    assert art.to_dump(_succeeded(reward=1)).reward == 1.0
    with pytest.raises(RolloutContractError, match="finite number"):
        art.to_dump(_succeeded(reward="high"))


def test_a_succeeded_result_without_reward_is_not_successful_as_in_art():
    dump = art.to_dump(_succeeded())
    assert not dump.is_successful() and "no reward" in dump.failure_reason()


@pytest.mark.parametrize("status", [Status.AGENT_ERROR, Status.TIMED_OUT, Status.CANCELLED, Status.DISPATCH_FAILED])
def test_every_failed_status_is_a_dump_with_its_status_and_no_reward(status):
    error = ErrorInfo(type="KeyError", message="'answer'", traceback="Traceback (most recent call last):\nKeyError")
    result = ClientResult.terminal(status, key=KEY, s3_bucket="b", error=error)
    dump = art.to_dump(result)
    assert not dump.is_successful() and dump.reward is None and dump.task_output["reward"] is None
    assert dump.failure_reason() == f"rollout {KEY.session_id} ended {status.value}: 'answer'"
    assert dump.exception.startswith("Traceback") and dump.task_output["status_code"] == result.status_code


def test_the_verl_and_slime_task_shape_sends_the_payload_and_config_as_rollout_fields():
    task = {"question": "1+1", "_config": {"base_url": "http://gw/v1", "model_id": "m", "api_key": "sid"}}
    assert art._request(task) == (
        {"question": "1+1"},
        None,
        {"base_url": "http://gw/v1", "model_id": "m", "api_key": "sid"},
    )


def test_the_experimental_loop_task_shape_gives_group_payload_and_bare_model_name():
    task = {"payload": {"q": 1}, "group_id": "uid-7", "llm": {"base_url": "u", "model": "openai/qwen", "api_key": "k"}}
    assert art._request(task) == ({"q": 1}, "uid-7", {"base_url": "u", "model_id": "qwen", "api_key": "k"})
    with pytest.raises(RolloutContractError, match="payload"):
        art._request({"payload": "text"})


def _experimental_row(**row: object) -> dict:
    """What ART's experimental verl loop (``make_task``) sends: the dataset row plus group, sampling and llm."""
    llm = {"model": "openai/qwen", "base_url": "http://gw/v1", "api_key": "sid", "temperature": 1.0, "top_p": 1.0}
    return {**row, "uid": "u-1", "group_id": "u-1", "sampling_params": {"temperature": 1.0}, "llm": llm}


@pytest.mark.parametrize(
    ("task", "match"),
    [
        (_experimental_row(prompt="2+2?", answer="4"), "no `payload` dict"),  # a row without a payload column
        ({**_experimental_row(payload={"q": 1}), "group_id": " "}, "no usable `group_id`"),
        ({**_experimental_row(payload={"q": 1}), "llm": {"model": "m"}}, r"lacks \['base_url', 'api_key'\]"),
        ({"prompt": "2+2?"}, "neither of ART's shapes"),
    ],
)
def test_a_task_art_s3_session_would_refuse_is_refused_not_sent_whole(task, match):
    # ART's own AgentCoreS3Session raises RolloutContractError for these; sent whole, the agent would get no
    # base_url and the result no group
    with pytest.raises(RolloutContractError, match=match):
        art._request(task)


def test_an_experimental_row_with_a_payload_column_sends_just_that_payload():
    assert art._request(_experimental_row(payload={"prompt": "2+2?", "answer": "4"}, prompt="ignored")) == (
        {"prompt": "2+2?", "answer": "4"},
        "u-1",
        {"base_url": "http://gw/v1", "model_id": "qwen", "api_key": "sid"},
    )


@pytest.mark.parametrize(
    ("stored", "successful", "reward"),
    [
        ({"rewards": [0.0, 0.5], "status_code": 200, "stop_reason": "end_turn"}, True, 0.5),
        ({"status_code": 500, "stop_reason": "boom", "traceback": "Traceback ...\nValueError: boom\n"}, False, None),
    ],
)
def test_a_document_of_an_unmodified_art_agent_is_the_dump_arts_own_session_would_make(stored, successful, reward):
    # GIVEN what ART 0.2.0's agent stores (no status, none of our fields), as our trainer reads it
    metadata = {"input_id": KEY.input_id, "s3_bucket": "b", "result_key": str(KEY), "payload": {}}
    result = ClientResult({**stored, **metadata})

    # WHEN it becomes ART's dump THEN it is what ART's AgentCoreS3Session makes of the same dict
    ours, arts = art.to_dump(result), art_s3_to_dump(dict(result))
    assert (ours.is_successful(), ours.reward) == (arts.is_successful(), arts.reward) == (successful, reward)
    assert (ours.exception is None) == (arts.exception is None)
