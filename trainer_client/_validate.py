"""Checks at the client's boundary: what cannot travel as JSON fails on submit, naming the field."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from rollout_contract import ROLLOUT_FIELD

__all__ = ["check_json", "check_payload"]


def check_payload(payload: object) -> dict[str, Any]:
    """Return ``payload`` as a dict if it is a JSON object whose values JSON represents exactly.

    Raises:
        TypeError: ``payload`` is not a mapping, or a value is not JSON (the message names its path).
        ValueError: a number is NaN or infinite (JSON has no such value; it would travel as ``null``),
            or ``_rollout`` is not an object.
    """
    if not isinstance(payload, Mapping):
        raise TypeError(f"payload must be a JSON object (a dict), got {type(payload).__name__}")
    check_json(payload, "payload")
    block = payload.get(ROLLOUT_FIELD)
    if block is not None and not isinstance(block, Mapping):
        raise ValueError(
            f"payload[{ROLLOUT_FIELD!r}] must be an object of rollout fields, got {type(block).__name__}; "
            "remove it or pass a dict"
        )
    return dict(payload)


def check_json(value: object, path: str) -> None:
    """Raise ``TypeError``/``ValueError`` naming ``path`` if ``value`` is not exactly representable as JSON."""
    if value is None or isinstance(value, str | bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{path} is {value!r}, which JSON cannot carry; use a finite number or null")
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{path} has a key {key!r} of type {type(key).__name__}; JSON keys are strings")
            check_json(item, f"{path}[{key!r}]")
        return
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            check_json(item, f"{path}[{index}]")
        return
    raise TypeError(
        f"{path} is a {type(value).__name__}, which is not JSON; convert it to a string, number, list or dict"
    )
