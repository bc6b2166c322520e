"""Result files: each benchmark writes its figures with the commit, machine and load they were measured at.

A benchmark calls :func:`begin` first (the load before, the start time, the command line) and
:meth:`Run.write` at its end; the file is ``benchmarks/results/<name>.json``. The docs link these files
instead of quoting numbers, so a figure always says where it came from (D84).

The load says what else ran; it does not say how fast the machine was. On the shared machines these run on, the
same CPU-bound code took 14 ms and 27 ms twenty minutes apart at a load under 1, so each file also records the
time of one fixed pure-Python workload (:func:`speed_probe_ms`) before and after the run: two runs' figures compare
when their probes agree.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"
REPO = RESULTS_DIR.parents[1]


@dataclass(frozen=True)
class Run:
    """One benchmark run: what :func:`begin` saw, for :meth:`write` to record with the figures."""

    name: str
    command: str
    load_before: tuple[float, float, float]
    probe_ms_before: float
    git: dict[str, Any]
    started: float = field(default_factory=time.monotonic)

    def write(self, figures: dict[str, Any], *, targets: dict[str, Any] | None = None) -> Path:
        """Write ``results/<name>.json`` (figures, targets, commit, machine, load) and say where."""
        record: dict[str, Any] = {
            "benchmark": self.name,
            "command": self.command,
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            **self.git,
            "machine": machine(),
            "load": {"before": list(self.load_before), "after": [round(x, 2) for x in os.getloadavg()]},
            "speed_probe_ms": {"before": self.probe_ms_before, "after": speed_probe_ms()},
            "wall_s": round(time.monotonic() - self.started, 1),
            "figures": figures,
        }
        if targets is not None:
            record["targets"] = targets
        RESULTS_DIR.mkdir(exist_ok=True)
        path = RESULTS_DIR / f"{self.name}.json"
        path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        print(f"result written to {path.relative_to(REPO)}", file=sys.stderr)
        return path


def begin(name: str) -> Run:
    """Start recording a run of benchmark ``name`` (the load now, the command line, the commit)."""
    command = " ".join([f"benchmarks/{Path(sys.argv[0]).name}", *sys.argv[1:]])
    load = os.getloadavg()
    return Run(
        name=name,
        command=command,
        load_before=(round(load[0], 2), round(load[1], 2), round(load[2], 2)),
        probe_ms_before=speed_probe_ms(),
        git=git_state(),
    )


def speed_probe_ms(rounds: int = 5) -> float:
    """How long this machine takes for one fixed pure-Python workload now (the fastest of ``rounds``), in ms."""
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        sum(i * i % 7 for i in range(200_000))
        best = min(best, time.perf_counter() - started)
    return round(best * 1000, 1)


def git_state() -> dict[str, Any]:
    """The commit checked out and the tracked files changed against it (results excluded)."""
    try:
        commit = _git("rev-parse", "HEAD")
        changed = [line[3:] for line in _git("status", "--porcelain", "--untracked-files=no").splitlines() if line]
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "changed_files": []}
    return {"commit": commit, "changed_files": [path for path in changed if not path.startswith("benchmarks/results/")]}


def machine() -> dict[str, Any]:
    """CPU count, memory, Python and OS of this machine."""
    pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    return {
        "cpus": os.cpu_count(),
        "memory_gib": round(pages * page_size / 2**30, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.rstrip("\n")
