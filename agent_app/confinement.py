"""Model-written code runs apart from the agent: another user, its own namespaces, a clean environment, limits.

The coding example's ``run_python`` tool and the sandbox daemon (``agent_app.sandbox``) start every model-written
program through :meth:`Confinement.command`, which wraps its argv in a small start-up program
(``agent_app/_confined_start.py``). Two modes (:func:`isolation_mode`, from ``ROLLOUT_SANDBOX_ISOLATION``):

- ``strict`` (the default when the agent runs as root, as the images do): the program runs as the sandbox user
  (:data:`SANDBOX_UID`, no supplementary groups, ``no_new_privs``), in new mount, PID, IPC and UTS namespaces and
  a network namespace with no interface up (unless :attr:`Confinement.network`): it cannot reach the credentials
  endpoint, the metadata address, S3 or the gateway; it sees a ``/proc`` of its own namespace (not the agent's
  processes), cannot signal or trace the agent (another uid), finds the hidden directories empty (the agent's
  home, the example's task set), and writes only to its working directory and a private ``/tmp`` (a tmpfs of
  :attr:`Confinement.tmp_mb`). Limits: CPU seconds, address space, processes of the sandbox user, bytes per file.
  When a step cannot be taken (not root, a namespace refused), the program does not run: exit code 126 and the
  step on stderr.
- ``unconfined`` (the default when the agent is not root; a developer's machine): the clean environment, the
  CPU, memory and file limits and a fresh directory, nothing more; a warning says so once per process.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cache
from pathlib import Path

__all__ = [
    "ISOLATION_ENV",
    "SANDBOX_GID",
    "SANDBOX_UID",
    "SANDBOX_USER",
    "Confinement",
    "ConfinementError",
    "Isolation",
    "clean_environment",
    "isolation_mode",
]

#: The variable that chooses the mode: ``strict``, ``unconfined`` or ``auto`` (strict when root; the default).
ISOLATION_ENV = "ROLLOUT_SANDBOX_ISOLATION"
#: The user model-written code runs as (the images create it with this uid; no passwd entry is needed).
SANDBOX_USER = "sandbox"
#: Its uid and gid: above the range login accounts take (1000-59999), so never a developer's own account.
SANDBOX_UID = SANDBOX_GID = 61000
_START = (Path(__file__).parent / "_confined_start.py").read_text(encoding="utf-8")
_LOG = logging.getLogger(__name__)


class Isolation(StrEnum):
    """How far model-written code is kept from the agent."""

    STRICT = "strict"
    UNCONFINED = "unconfined"


class ConfinementError(RuntimeError):
    """The confinement asked for cannot be had here; the message says what to change."""


def isolation_mode(environ: Mapping[str, str] | None = None) -> Isolation:
    """The mode ``ROLLOUT_SANDBOX_ISOLATION`` chooses (``auto``: strict as root, else unconfined with a warning).

    Raises:
        ConfinementError: the value is unknown, or ``strict`` is asked for by a process that is not root.
    """
    value = (os.environ if environ is None else environ).get(ISOLATION_ENV, "auto").strip().lower()
    root = os.geteuid() == 0
    if value == "auto":
        if not root:
            _warn_unconfined()
        return Isolation.STRICT if root else Isolation.UNCONFINED
    try:
        mode = Isolation(value)
    except ValueError:
        raise ConfinementError(f"{ISOLATION_ENV}={value!r}: use strict, unconfined or auto") from None
    if mode is Isolation.STRICT and not root:
        raise ConfinementError(
            f"{ISOLATION_ENV}=strict needs the agent to run as root (it starts model-written code as uid "
            f"{SANDBOX_UID} in new namespaces); run it as root, as the images do, or set {ISOLATION_ENV}=unconfined "
            "to run that code as the agent's own user with limits only"
        )
    return mode


@cache
def _warn_unconfined() -> None:
    _LOG.warning(
        "model-written code runs as the agent's own user (limits only): this process is not root; run the agent as "
        "root for the strict isolation (%s=strict makes it an error)",
        ISOLATION_ENV,
    )


def clean_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The only variables a confined program gets: ``PATH`` (this interpreter's folder first), ``LANG``, ``extra``."""
    path = os.pathsep.join(dict.fromkeys([os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin", "/bin"]))
    return {"PATH": path, "LANG": "C.UTF-8", **(extra or {})}


@dataclass(frozen=True)
class Confinement:
    """What one confined program may use and see.

    Attributes:
        cpu_s: CPU seconds (``RLIMIT_CPU``; SIGXCPU past it).
        memory_mb: address space (``RLIMIT_AS``), ``None`` for no limit.
        processes: processes and threads of the sandbox user (``RLIMIT_NPROC``; strict mode only).
        file_mb: bytes of any one file it writes (``RLIMIT_FSIZE``).
        tmp_mb: the size of its private ``/tmp`` (strict mode).
        network: keep the agent's network (the task grants it); otherwise a namespace without one.
        workdir: a directory it works in and keeps between runs (owned by the sandbox user: :meth:`own`);
            ``None``: its private ``/tmp``, empty at each run.
        hidden: directories it finds empty (the agent's home and its user's home are always hidden).
    """

    cpu_s: int
    memory_mb: int | None = 256
    processes: int = 64
    file_mb: int = 10
    tmp_mb: int = 64
    network: bool = False
    workdir: str | None = None
    hidden: tuple[str, ...] = field(default=())

    def command(self, argv: Sequence[str], *, scratch: str | Path, files: Sequence[str | Path] = ()) -> list[str]:
        """The argv that runs ``argv`` confined (start it with :func:`clean_environment` as its whole environment).

        ``files`` are copied into its working directory first (by name) when it has none; ``scratch`` is where the
        unconfined mode makes that directory.

        Raises:
            ConfinementError: the mode cannot be had here (see :func:`isolation_mode`).
        """
        strict = isolation_mode() is Isolation.STRICT
        spec = {
            "strict": strict,
            "uid": SANDBOX_UID,
            "gid": SANDBOX_GID,
            "cpu_s": max(1, int(self.cpu_s)),
            "memory_mb": self.memory_mb,
            "processes": self.processes,
            "file_mb": self.file_mb,
            "tmp_mb": self.tmp_mb,
            "network": self.network,
            "workdir": self.workdir,
            "hidden": _hidden(self.hidden),
            "keep": sorted({os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix)}),
            "files": [str(path) for path in files],
            "scratch": str(scratch),
        }
        return [sys.executable, "-I", "-c", _START, json.dumps(spec), *argv]

    def own(self, directory: str | Path) -> None:
        """Give ``directory`` to the sandbox user (strict mode; nothing otherwise), so confined runs can write there."""
        if isolation_mode() is Isolation.STRICT:
            os.chown(directory, SANDBOX_UID, SANDBOX_GID)


def _hidden(extra: Sequence[str]) -> list[str]:
    homes = {os.path.expanduser("~"), os.environ.get("HOME", "/")}
    try:
        import pwd

        homes.add(pwd.getpwuid(os.getuid()).pw_dir)
    except KeyError:
        pass
    return sorted({os.path.realpath(path) for path in [*homes, *extra]} - {"/"})
