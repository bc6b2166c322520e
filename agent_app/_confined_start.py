"""The first code of a confined process: run by ``agent_app.confinement`` as ``python -I -c SOURCE SPEC ARGV...``.

It starts as the agent's user. In the strict mode (root) it enters new mount, PID, IPC, UTS and (unless the spec
grants the network) network namespaces, forks the namespace's first process, and there covers the hidden
directories, ``/tmp``, ``/var/tmp`` and ``/dev/shm`` with empty size-limited tmpfs (binding back the interpreter's
directories and the working directory), mounts a ``/proc`` of the new PID namespace, writes the given files into
``/tmp``, sets the resource limits, becomes the sandbox user and runs ARGV. The first parent waits and ends as its
child ended. In the unconfined mode it only sets the limits (no process limit: it would count the agent's own
processes), copies the files into a fresh directory under the spec's ``scratch`` and runs ARGV there.
Standard library only, no imports of this project: ``-I`` keeps the agent's ``PYTHONPATH`` out.
"""

import ctypes
import json
import os
import resource
import signal
import sys
import tempfile
from typing import Any, NoReturn

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET = (
    0x20000,
    0x4000000,
    0x8000000,
    0x20000000,
    0x40000000,
)
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 8, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
LIBC = ctypes.CDLL(None, use_errno=True)


def fail(step: str, code: int = 126) -> NoReturn:
    """Say which step failed, in the process's stderr, and end with ``code``."""
    error = ctypes.get_errno()
    sys.stderr.write(f"confinement: {step} failed: {os.strerror(error) if error else 'error'}\n")
    os._exit(code)


def call(function: Any, *arguments: Any, step: str) -> None:
    if function(*arguments) != 0:
        fail(step)


def encode(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


def mount(source: str | None, target: str, kind: str | None, flags: int, data: str | None = None) -> None:
    arguments = (encode(source), encode(target), encode(kind), ctypes.c_ulong(flags), encode(data))
    call(LIBC.mount, *arguments, step=f"mount {kind or 'bind'} on {target}")


def under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def build_filesystem(spec: dict[str, Any]) -> None:
    """Hide what the sandbox user must not see; give it a private, size-limited ``/tmp``."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    covered = [*spec["hidden"], "/tmp", "/var/tmp", "/dev/shm"]
    kept = [path for path in [*spec["keep"], spec["workdir"]] if path and any(under(path, c) for c in covered)]
    handles = {path: os.open(path, os.O_PATH | os.O_DIRECTORY) for path in kept if os.path.isdir(path)}
    for directory in spec["hidden"]:
        if os.path.isdir(directory):
            mount("hidden", directory, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    scratch = f"size={spec['tmp_mb']}m,mode=1777"
    for directory in ("/tmp", "/var/tmp", "/dev/shm"):
        if os.path.isdir(directory):
            mount("private", directory, "tmpfs", MS_NOSUID | MS_NODEV, scratch)
    for path, handle in handles.items():
        os.makedirs(path, mode=0o755, exist_ok=True)
        mount(f"/proc/self/fd/{handle}", path, None, MS_BIND | MS_REC)
        os.close(handle)
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)


def set_limits(spec: dict[str, Any], processes: bool) -> None:
    limits = [
        (resource.RLIMIT_CPU, spec["cpu_s"], spec["cpu_s"] + 1),
        (resource.RLIMIT_FSIZE, spec["file_mb"] << 20, None),
    ]
    if spec["memory_mb"]:
        limits.append((resource.RLIMIT_AS, spec["memory_mb"] << 20, None))
    if processes:
        limits.append((resource.RLIMIT_NPROC, spec["processes"], None))
    for kind, soft, hard in limits:
        resource.setrlimit(kind, (soft, soft if hard is None else hard))


def write_files(contents: dict[str, bytes], directory: str, owner: tuple[int, int] | None) -> None:
    for name, data in contents.items():
        path = os.path.join(directory, name)
        with open(path, "wb") as target:
            target.write(data)
        if owner is not None:
            os.chown(path, *owner)


def end_as(status: int) -> NoReturn:
    """End this process as its child ended: the same exit code, or killed by the same signal."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def main() -> None:
    spec, argv = json.loads(sys.argv[1]), sys.argv[2:]
    contents: dict[str, bytes] = {}
    for path in spec["files"]:
        with open(path, "rb") as source:
            contents[os.path.basename(path)] = source.read()
    if not spec["strict"]:
        directory = tempfile.mkdtemp(prefix="run-", dir=spec["scratch"])
        write_files(contents, directory, None)
        set_limits(spec, processes=False)
        os.environ["TMPDIR"] = os.environ["HOME"] = directory
        os.chdir(spec["workdir"] or directory)
        os.execvp(argv[0], argv)
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | (0 if spec["network"] else CLONE_NEWNET)
    call(LIBC.unshare, flags, step="unshare (new namespaces)")
    child = os.fork()
    if child:
        for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(number, lambda _number, _frame: os.kill(child, signal.SIGKILL))
        end_as(os.waitpid(child, 0)[1])
    build_filesystem(spec)
    uid, gid = spec["uid"], spec["gid"]
    write_files(contents, "/tmp", (uid, gid))
    set_limits(spec, processes=True)
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    call(LIBC.prctl, PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0, step="prctl(PR_SET_PDEATHSIG)")
    call(LIBC.prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0, step="prctl(PR_SET_NO_NEW_PRIVS)")
    os.environ["TMPDIR"] = os.environ["HOME"] = "/tmp"
    try:
        os.chdir(spec["workdir"] or "/tmp")
        os.execvp(argv[0], argv)
    except OSError as error:
        sys.stderr.write(f"confinement: cannot run {argv[0]!r} in {spec['workdir'] or '/tmp'}: {error}\n")
        os._exit(127)


if __name__ == "__main__":
    main()
