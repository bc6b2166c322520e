"""Restart a local Lambda worker that dies, as Lambda replaces an execution environment that crashed.

``python -m local_stack.supervisor --pid-file F -- python -m local_stack.worker ...`` runs the worker as
its child (same process group, so stopping the stack's group stops both) and starts a new one whenever
it dies of anything but a clean stop: killed by a signal (SIGKILL, OOM) or exiting non-zero. The
child's pid is written to ``--pid-file`` at every start, so tests and the soak benchmark can kill the
environment itself. A child that keeps dying is restarted after a growing pause (1 s doubling to 30 s,
back to 1 s once one ran for a minute); one that dies before it was ever ready (``--ready-file``) is a
configuration error and is not restarted. SIGTERM or SIGINT stops the child and then the supervisor.
"""

from __future__ import annotations

import argparse
import logging
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

__all__ = ["main", "supervise"]

logger = logging.getLogger("local_stack.supervisor")

FIRST_PAUSE_S = 1.0
MAX_PAUSE_S = 30.0
#: A child that ran this long before dying is not crash-looping: the next restart pauses the first pause.
HEALTHY_RUN_S = 60.0
_STOP_GRACE_S = 10.0


def supervise(command: Sequence[str], *, pid_file: Path | None, ready_file: Path | None, stop: threading.Event) -> int:
    """Run ``command`` until ``stop`` is set, restarting it whenever it dies abnormally; return its last code.

    A child that dies before ``ready_file`` ever appeared is not restarted (a configuration error, not a
    crash): its exit code is returned, so the stack's start fails with the worker's log.
    """
    pause = FIRST_PAUSE_S
    while True:
        started = time.monotonic()
        child = subprocess.Popen(list(command), stdin=subprocess.DEVNULL)  # noqa: S603 - argv from the stack
        if pid_file is not None:
            pid_file.write_text(f"{child.pid}\n")
        logger.info("started %s (pid %d)", command[-1] if command else "", child.pid)
        code = _wait(child, stop)
        if stop.is_set() or code in (0, -signal.SIGTERM):
            return code
        if ready_file is not None and not ready_file.exists():
            logger.error("worker pid %d died (code %d) before it was ready; not restarting it", child.pid, code)
            return code
        ran = time.monotonic() - started
        pause = FIRST_PAUSE_S if ran >= HEALTHY_RUN_S else pause
        cause = f"signal {-code}" if code < 0 else f"exit code {code}"
        logger.warning("worker pid %d died (%s) after %.0f s; restarting in %.0f s", child.pid, cause, ran, pause)
        if stop.wait(pause):
            return code
        pause = min(MAX_PAUSE_S, pause * 2)


def _wait(child: subprocess.Popen[bytes], stop: threading.Event) -> int:
    """Wait for ``child``; once ``stop`` is set, ask it to stop (SIGTERM, then SIGKILL) and return its code."""
    while True:
        try:
            return child.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            if not stop.is_set():
                continue
        child.terminate()
        try:
            return child.wait(timeout=_STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            child.kill()
            return child.wait()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the supervisor (``-- COMMAND...`` after its own options)."""
    parser = argparse.ArgumentParser(prog="python -m local_stack.supervisor", description=__doc__.splitlines()[0])
    parser.add_argument("--pid-file", type=Path, help="write the current child's pid here at every start")
    parser.add_argument("--ready-file", type=Path, help="restart only a worker that got ready once (this file)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the worker's command line")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to supervise after --")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s supervisor %(message)s")
    stop = threading.Event()

    def request_stop(signum: int, _frame: FrameType | None) -> None:
        logger.info("signal %d: stopping the worker", signum)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    code = supervise(command, pid_file=args.pid_file, ready_file=args.ready_file, stop=stop)
    return 0 if stop.is_set() else code


if __name__ == "__main__":
    sys.exit(main())
