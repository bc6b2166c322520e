"""``agent_app.confinement``: which mode a process gets, and what a confined program keeps of the agent."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from agent_app.confinement import (
    ISOLATION_ENV,
    SANDBOX_UID,
    Confinement,
    ConfinementError,
    Isolation,
    clean_environment,
    isolation_mode,
)

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="the strict isolation needs root (D101)")


@pytest.mark.parametrize(
    ("value", "euid", "mode"),
    [(None, 0, "strict"), (None, 1000, "unconfined"), ("unconfined", 0, "unconfined"), ("strict", 0, "strict")],
)
def test_the_mode_is_strict_for_root_unless_it_is_turned_off(
    monkeypatch: pytest.MonkeyPatch, value: str | None, euid: int, mode: str
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: euid)
    assert isolation_mode({} if value is None else {ISOLATION_ENV: value}) is Isolation(mode)


def test_strict_asked_for_without_root_or_an_unknown_mode_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(ConfinementError, match="needs the agent to run as root.*=unconfined"):
        isolation_mode({ISOLATION_ENV: "strict"})
    with pytest.raises(ConfinementError, match="use strict, unconfined or auto"):
        isolation_mode({ISOLATION_ENV: "sometimes"})


def run(confinement: Confinement, argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    command = confinement.command(argv, scratch=tmp_path)
    return subprocess.run(command, env=clean_environment(), capture_output=True, text=True, timeout=60)


@root_only
def test_a_confined_program_keeps_its_workdir_and_the_network_only_when_granted(tmp_path: Path) -> None:
    # GIVEN a workdir given to the sandbox user, and a hidden folder in it with a secret
    workdir = tmp_path / "work"
    hidden = workdir / "hidden"
    hidden.mkdir(parents=True)
    (hidden / "secret").write_text("x")
    confinement = Confinement(cpu_s=10, workdir=str(workdir), hidden=(str(hidden),))
    confinement.own(workdir)
    script = "import os, socket; open('kept', 'w').write('y'); print(os.getuid(), os.listdir(%r)); "
    script += "socket.getaddrinfo('localhost', 80); print(len(open('/proc/net/dev').read().splitlines()))"
    # WHEN a program writes there and looks at the hidden folder and its network devices
    done = run(confinement, ["python3", "-c", script % str(hidden)], tmp_path)
    granted = run(
        Confinement(cpu_s=10, network=True), ["python3", "-c", "print(open('/proc/net/dev').read())"], tmp_path
    )
    # THEN it ran as the sandbox user, its file is kept, the hidden folder is empty, its only device is loopback
    assert done.stdout.splitlines() == [f"{SANDBOX_UID} []", "3"], done.stderr
    assert (workdir / "kept").read_text() == "y"
    # AND with the network granted it sees the machine's devices
    assert len(granted.stdout.splitlines()) > 3


@root_only
def test_a_program_that_cannot_start_confined_says_why(tmp_path: Path) -> None:
    done = run(Confinement(cpu_s=10, workdir=str(tmp_path / "missing")), ["true"], tmp_path)
    assert done.returncode == 127 and "confinement: cannot run 'true' in " in done.stderr
