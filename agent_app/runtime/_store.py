"""Invocation records on the local filesystem: ``started.json`` when accepted, ``result.json`` when finished.

One app process owns a session's records (ACR runs one process per session); the session id is hashed into
the path, never used as a path component. Writes are atomic (a staged file renamed over the record).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from agent_app.runtime._protocol import InvocationState, state

__all__ = ["InvocationStore"]

DEFAULT_DIR_NAME = ".agentcore_runtime"


class InvocationStore:
    """The records of every invocation this app accepted, under ``root``."""

    def __init__(self, root: str | Path | None = None) -> None:
        """Use ``root`` (default: ``.agentcore_runtime`` in the OS temp directory), failing now if it is not writable.

        Raises:
            OSError: ``root`` cannot be created or written to.
        """
        self.root = Path(root) if root is not None else Path(tempfile.gettempdir()) / DEFAULT_DIR_NAME
        self.root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=self.root):
            pass

    def read(self, session_id: str, invocation_id: str) -> InvocationState | None:
        """The finished record, else the started one, else ``None``."""
        directory = self._directory(session_id, invocation_id)
        for name in ("result.json", "started.json"):
            path = directory / name
            if path.exists():
                record: InvocationState = json.loads(path.read_text(encoding="utf-8"))
                return record
        return None

    def start(self, session_id: str, invocation_id: str) -> None:
        """Record that an invocation was accepted and is running."""
        directory = self._directory(session_id, invocation_id)
        directory.mkdir(parents=True, exist_ok=True)
        self._write(directory / "started.json", state(invocation_id, "in_progress"))

    def finish(self, session_id: str, record: InvocationState) -> None:
        """Record a finished invocation.

        Raises:
            ValueError: the record holds a value JSON cannot hold (NaN included); nothing is written.
            TypeError: the same, for a value of a type JSON has no form for.
        """
        self._write(self._directory(session_id, record["invocation_id"]) / "result.json", record)

    def _directory(self, session_id: str, invocation_id: str) -> Path:
        return self.root / hashlib.sha256(session_id.encode()).hexdigest() / invocation_id

    @staticmethod
    def _write(path: Path, record: InvocationState) -> None:
        data = json.dumps(record, allow_nan=False)
        fd, staged = tempfile.mkstemp(dir=path.parent, prefix=".staged-")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            os.replace(staged, path)
        finally:
            Path(staged).unlink(missing_ok=True)
