"""The submission journal: one JSON line per submitted rollout, so a new process can collect results."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from pathlib import Path

from rollout_contract import ResultKey, parse_result_key

__all__ = ["Journal", "read_journal"]


class Journal:
    """Append ``{"result_key": ...}`` lines to a file, flushed after every write."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def record(self, keys: Iterable[str | ResultKey]) -> None:
        """Append the keys of rollouts just submitted."""
        lines = "".join(json.dumps({"result_key": str(key)}) + "\n" for key in keys)
        with self._lock, self.path.open("a", encoding="utf-8") as file:
            file.write(lines)


def read_journal(path: str | Path) -> list[ResultKey]:
    """Return the result keys recorded in a journal file, in submission order, without duplicates.

    Raises:
        FileNotFoundError: there is no journal at ``path``.
        ValueError: a line is not a journal entry (the message names the line).
    """
    keys: dict[ResultKey, None] = {}
    with Path(path).open(encoding="utf-8") as file:
        for number, line in enumerate(file, start=1):
            if not line.strip():
                continue
            try:
                keys[parse_result_key(json.loads(line)["result_key"])] = None
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{number} is not a journal entry ({exc})") from exc
    return list(keys)
