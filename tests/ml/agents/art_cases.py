"""The handler outcomes the differential tests run under ART 0.2.0's ``AgentCoreRLApp`` and under ours.

``payload["case"]`` names one: what the handler returns (or raises). ``FIDELITY_PROBES`` are the cases of the
fidelity issue (values ART stores as-is that our agent used to reject, convert or overwrite).
"""

from __future__ import annotations

import copy
import datetime
import math
import time
from collections.abc import Callable
from typing import Any


def _raise(exc: BaseException) -> Callable[[], Any]:
    def fail() -> Any:
        raise exc

    return fail


def _returns(value: Any) -> Callable[[], Any]:
    # a fresh copy each time: ART adds its metadata to the dict the handler returned
    return lambda: copy.deepcopy(value)


CASES: dict[str, Callable[[], Any]] = {
    # successes
    "reward": _returns({"rewards": 1.0, "response": "#### 4"}),
    "reward_list": _returns({"rewards": [0.0, 0.5, 1.0], "metrics": {"turns": 3}}),
    "no_reward": _returns({"answer": "x"}),
    "empty": _returns({}),
    "nested_values": _returns({"rewards": 0.5, "trajectory": [{"role": "user", "content": "é"}], "n": None}),
    "tuple_and_int_key": _returns({"rewards": 1, "pair": (1, 2), 7: "seven"}),
    # fidelity probes: what ART stores as-is
    "rewards_dict": _returns({"rewards": {"correct": 1.0}}),
    "rewards_nested": _returns({"rewards": [[1.0], [0.0]]}),
    "rewards_none_in_list": _returns({"rewards": [1.0, None]}),
    "stop_reason_not_str": _returns({"rewards": 1.0, "stop_reason": 7}),
    "rewards_int": _returns({"rewards": 1}),
    "rewards_str": _returns({"rewards": "0.5"}),
    "rewards_bool": _returns({"rewards": True}),
    "rewards_nan": _returns({"rewards": math.nan}),
    "rewards_inf": _returns({"rewards": [0.5, math.inf]}),
    "own_status": _returns({"rewards": 1.0, "status": "mine"}),
    "own_error": _returns({"rewards": 1.0, "error": "none at all"}),
    "own_timings": _returns({"rewards": 1.0, "timings": [1, 2]}),
    "own_session_id": _returns({"rewards": 1.0, "session_id": "forged"}),
    "own_exp_id": _returns({"rewards": 1.0, "exp_id": "other"}),
    # ART's own metadata keys, which ART sets by its rule
    "own_status_code_and_stop_reason": _returns({"status_code": 500, "stop_reason": "gave up"}),
    "own_art_metadata": _returns({"rewards": 1.0, "input_id": "x", "s3_bucket": "y", "result_key": "z", "payload": 1}),
    # failures
    "raises": _raise(ValueError("bad input")),
    "raises_key_error": _raise(KeyError("answer")),
    "returns_float": _returns(0.5),
    "returns_none": _returns(None),
    "returns_list": _returns([1, 2]),
    "unserializable_object": _returns({"rewards": 1.0, "tool": object()}),
    "unserializable_datetime": _returns({"rewards": 1.0, "at": datetime.datetime(2026, 1, 1)}),
    "unserializable_bytes": _returns({"rewards": 1.0, "blob": b"x"}),
}

FIDELITY_PROBES = (
    "rewards_dict",
    "rewards_nested",
    "rewards_none_in_list",
    "stop_reason_not_str",
    "rewards_int",
    "rewards_str",
    "rewards_bool",
    "rewards_nan",
    "rewards_inf",
    "own_status",
    "own_error",
    "own_timings",
    "own_session_id",
    "own_exp_id",
)


def outcome(payload: dict[str, Any]) -> Any:
    """What the handler of ``payload["case"]`` returns (or raises), after ``payload["sleep_s"]`` seconds (0)."""
    time.sleep(float(payload.get("sleep_s", 0)))
    return CASES[payload["case"]]()


def sync_handler(payload):
    return outcome(payload)


async def async_handler(payload, context):
    return outcome(payload)
