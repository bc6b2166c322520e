"""The agent site's ``sitecustomize``: a bind to 8080 becomes a bind to ``$PORT``, in a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from acr_helpers import free_port

from local_stack.acr_emulator.process import AGENT_SITE

pytestmark = pytest.mark.processes

PROBE = """
import json, socket
def bound(family, kind, address):
    with socket.socket(family, kind) as sock:
        sock.bind(address)
        return sock.getsockname()[:2]
print(json.dumps({
    "acr": bound(socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", 8080)),
    "wildcard": bound(socket.AF_INET, socket.SOCK_STREAM, ("0.0.0.0", 8080)),
    "other": bound(socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", 0))[0],
    "udp": bound(socket.AF_INET, socket.SOCK_DGRAM, ("127.0.0.1", 0))[0],
}))
"""


def _run(pythonpath: list[Path], port: int) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PORT": str(port), "PYTHONPATH": os.pathsep.join(map(str, pythonpath))}
    return subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=30)


def test_a_bind_to_8080_binds_the_sessions_port_on_loopback_and_nothing_else_changes(tmp_path):
    port = free_port()

    done = _run([AGENT_SITE], port)

    assert done.returncode == 0, done.stderr
    probe = json.loads(done.stdout)
    assert probe["acr"] == ["127.0.0.1", port]
    assert probe["wildcard"] == ["127.0.0.1", port]  # all interfaces -> loopback: agents are reached over it only
    assert probe["other"] == "127.0.0.1" and probe["udp"] == "127.0.0.1"


def test_a_sitecustomize_further_down_the_path_still_runs(tmp_path):
    # GIVEN a virtualenv's (or a distribution's) own sitecustomize after the agent site on the path
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import sys\nsys.stderr.write('their sitecustomize ran\\n')\n")

    # WHEN an agent interpreter starts
    done = _run([AGENT_SITE, theirs], free_port())

    # THEN both ran: the port is mapped and theirs printed its line
    assert done.returncode == 0, done.stderr
    assert "their sitecustomize ran" in done.stderr
    assert json.loads(done.stdout)["acr"][1] != 8080
