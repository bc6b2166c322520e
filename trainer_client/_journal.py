"""The submission journal: a write-ahead log of submitted rollouts, so a new process can collect them.

Before a request is sent, its line ``{"result_key": ..., "request": <the dispatch message>}`` is written;
after the dispatch queue accepted a send, ``{"sent": [keys]}``; after it refused one for good,
``{"refused": [keys]}``; after an interrupted ``rollouts eval`` cancelled one, ``{"cancelled": [keys]}`` (a
resume submits that sample again instead of collecting it). A process that restarts
(:meth:`RolloutClient.attach_journal`) resends every request it cannot prove was sent (the dispatcher starts a
rollout at most once per session id, so a resend of a request that did arrive changes nothing) and fails the
refused ones at once. Lines holding only a ``result_key`` (journals of earlier versions) count as sent. Every
write is flushed.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from rollout_contract import DispatchRequest, ResultKey, parse_result_key

__all__ = ["Journal", "JournalEntry", "read_journal", "read_journal_entries"]


@dataclass
class JournalEntry:
    """What a journal says about one rollout.

    Attributes:
        key: the rollout's result key.
        request: the dispatch message as it was (to be) sent; ``None`` in journals of earlier versions.
        sent: the dispatch queue accepted it (or the journal predates send markers).
        refused: the dispatch queue refused it for good.
        cancelled: an interrupted eval cancelled it; a resume runs the sample again.
    """

    key: ResultKey
    request: str | None = None
    sent: bool = False
    refused: bool = False
    cancelled: bool = False


class Journal:
    """Append journal lines to a file, flushed after every write.

    Raises:
        ValueError: the journal's directory does not exist (checked when the journal is created).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.parent.is_dir():
            raise ValueError(
                f"journal {self.path}: directory {self.path.parent} does not exist; create it or choose another path"
            )
        self._lock = threading.Lock()

    def record(self, requests: Iterable[DispatchRequest]) -> None:
        """Append the requests about to be sent (write-ahead)."""
        self._write(json.dumps({"result_key": str(r.key), "request": r.to_body()}) + "\n" for r in requests)

    def mark_sent(self, keys: Iterable[str | ResultKey]) -> None:
        """Record that the dispatch queue accepted these rollouts."""
        self._mark("sent", keys)

    def mark_refused(self, keys: Iterable[str | ResultKey]) -> None:
        """Record that the dispatch queue refused these rollouts for good (their futures failed)."""
        self._mark("refused", keys)

    def mark_cancelled(self, keys: Iterable[str | ResultKey]) -> None:
        """Record that these rollouts were cancelled by an interrupted run (a resume runs them again)."""
        self._mark("cancelled", keys)

    def _mark(self, field: str, keys: Iterable[str | ResultKey]) -> None:
        keys = [str(key) for key in keys]
        if keys:
            self._write([json.dumps({field: keys}) + "\n"])

    def _write(self, lines: Iterable[str]) -> None:
        text = "".join(lines)
        with self._lock, self.path.open("a", encoding="utf-8") as file:
            file.write(text)


def read_journal_entries(path: str | Path) -> list[JournalEntry]:
    """Return what the journal at ``path`` says about each rollout, in submission order.

    Raises:
        FileNotFoundError: there is no journal at ``path``.
        ValueError: a line is not a journal entry (the message names the line).
    """
    entries: dict[str, JournalEntry] = {}
    with Path(path).open(encoding="utf-8") as file:
        for number, line in enumerate(file, start=1):
            if not line.strip():
                continue
            try:
                _apply(json.loads(line), entries)
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{number} is not a journal entry ({exc})") from exc
    return list(entries.values())


def _apply(line: dict[str, object], entries: dict[str, JournalEntry]) -> None:
    if "result_key" in line:
        key = parse_result_key(str(line["result_key"]))
        request = line.get("request")
        if str(key) not in entries:
            entries[str(key)] = JournalEntry(key, request if isinstance(request, str) else None, sent=request is None)
        return
    fields = ("sent", "refused", "cancelled")
    for field in fields:
        keys = line.get(field)
        for key in keys if isinstance(keys, list) else ():
            entry = entries.get(str(parse_result_key(key)))
            if entry is not None:
                setattr(entry, field, True)
    if not any(field in line for field in fields):
        raise KeyError("result_key")


def read_journal(path: str | Path) -> list[ResultKey]:
    """Return the result keys recorded in a journal file, in submission order, without duplicates.

    Raises:
        FileNotFoundError: there is no journal at ``path``.
        ValueError: a line is not a journal entry (the message names the line).
    """
    return [entry.key for entry in read_journal_entries(path)]
