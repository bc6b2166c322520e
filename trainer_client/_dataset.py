"""Reading JSON inputs strictly: a dataset (JSONL, one JSON object per line) and one JSON object.

Strict means JSON, not Python's reading of it: ``NaN`` and ``Infinity`` are refused, every line must be an
object, the file must be UTF-8; every error names the file and line and says what to give instead.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["json_object", "read_dataset"]


def read_dataset(path: str | Path) -> list[dict[str, Any]]:
    """Read a JSONL dataset: one JSON object (an agent payload) per non-blank line.

    Raises:
        ValueError: the file cannot be read, is not UTF-8, has a line that is not one JSON object, or has no rows.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read dataset {path}: {exc.strerror}") from exc
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        line_number = data.count(b"\n", 0, exc.start) + 1
        raise ValueError(
            f"{path}:{line_number} is not UTF-8 (byte 0x{data[exc.start]:02x}); save the dataset as UTF-8 JSONL"
        ) from exc
    rows = [
        json_object(line, f"{path}:{number}", "each line must be one JSON object")
        for number, line in enumerate(lines, start=1)
        if line.strip()
    ]
    if not rows:
        raise ValueError(f"dataset {path} has no rows; give one JSON object (an agent payload) per line")
    return rows


def json_object(text: str, where: str, fix: str) -> dict[str, Any]:
    """Parse ``text`` as one JSON object (strict: no ``NaN``); a ``ValueError`` names ``where`` and ``fix``."""
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except _NotJsonConstantError as exc:
        raise ValueError(f"{where} holds {exc}, which is not JSON; use a number or null") from exc
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where} is not JSON ({exc.msg}); {fix}") from exc
    if not isinstance(value, dict):
        raise ValueError(f"{where} is a JSON {type(value).__name__}; {fix}")
    return value


class _NotJsonConstantError(ValueError):
    """A row holds ``NaN``, ``Infinity`` or ``-Infinity`` (Python's json reads them; JSON has none)."""


def _refuse_constant(constant: str) -> Any:
    raise _NotJsonConstantError(constant)
