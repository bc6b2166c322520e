"""The worker supervisor: replaces a worker that dies, gives up on one that never got ready, stops cleanly."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

from local_stack import supervisor

pytestmark = pytest.mark.processes


def _child(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_worker_killed_after_it_was_ready_is_replaced_until_the_supervisor_stops(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(supervisor, "FIRST_PAUSE_S", 0.05)
    ready, starts = tmp_path / "ready", tmp_path / "starts"
    # GIVEN a worker that gets ready, counts its start, then is SIGKILLed
    code = (
        f"import os, pathlib, signal; pathlib.Path({str(ready)!r}).touch(); "
        f"open({str(starts)!r}, 'a').write('x'); os.kill(os.getpid(), signal.SIGKILL)"
    )
    stop = threading.Event()

    def stop_after_three_starts() -> None:
        while not starts.exists() or len(starts.read_text()) < 3:
            time.sleep(0.05)
        stop.set()

    threading.Thread(target=stop_after_three_starts, daemon=True).start()
    # WHEN it is supervised
    supervisor.supervise(_child(code), pid_file=tmp_path / "pid", ready_file=ready, stop=stop)
    # THEN it was started again after each death, and the pid file names the last one
    assert len(starts.read_text()) >= 3
    assert int((tmp_path / "pid").read_text()) > 0


def test_a_worker_that_dies_before_it_was_ever_ready_is_not_restarted(tmp_path: Path) -> None:
    code = supervisor.supervise(
        _child("import sys; sys.exit(3)"), pid_file=None, ready_file=tmp_path / "ready", stop=threading.Event()
    )
    assert code == 3


def test_a_worker_that_exits_cleanly_is_not_restarted(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    ready.touch()
    assert supervisor.supervise(_child("pass"), pid_file=None, ready_file=ready, stop=threading.Event()) == 0
