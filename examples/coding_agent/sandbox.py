"""Run model-written Python apart from the agent: confined (``agent_app.confinement``), with time and output limits.

Each rollout gets its own directory (:meth:`Sandbox.for_session`, private to the agent's user), where the agent
writes the model's code. Each run is a fresh isolated interpreter (``python -I``) started through
:class:`~agent_app.confinement.Confinement`: as the sandbox user, with no network (unless the task grants it), in a
private ``/tmp`` that holds only a copy of its file, with this example's directory (the task set) and the agent's
home hidden, under limits on address space, CPU seconds, processes and file size, and a wall-clock timeout after
which its whole process group is killed.

:meth:`Sandbox.run_tests` scores a solution against its task's tests, each ``assert EXPR == VALUE`` (or
``is VALUE``) with a literal ``VALUE``. The child gets only the expressions: it runs the solution, evaluates
each expression under its own timer (a call that loops or raises fails alone) and reports the values; the
parent compares them with the expected literals it kept. So the solution, which runs in the reporting
process, cannot forge a pass: it would have to report the right values, which is solving the task (an
object whose ``__eq__`` says yes is no literal, and fails).
"""

from __future__ import annotations

import ast
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_app.confinement import Confinement, clean_environment

__all__ = ["Check", "Limits", "RunResult", "Sandbox", "TestScore", "parse_tests"]

# The test harness (the model's file is the solution): read the nonce, run the solution, then report the value
# of each expression (its repr) or that it failed, one line each after the nonce.
_TEST_HARNESS = """
import json, signal, sys
nonce = sys.stdin.readline().strip()
expressions = json.loads(sys.stdin.read())
per_test = float(__per_test_s__)
namespace = {"__name__": "solution"}
def expired(signum, frame):
    raise TimeoutError("test took too long")
signal.signal(signal.SIGALRM, expired)
try:
    exec(compile(open(__solution__).read(), "solution.py", "exec"), namespace)
except BaseException as error:
    print(nonce, json.dumps({"error": repr(error)[:300]}), flush=True)
    raise SystemExit(0)
for index, expression in enumerate(expressions):
    signal.setitimer(signal.ITIMER_REAL, per_test)
    try:
        value = repr(eval(compile(expression, "test", "eval"), dict(namespace)))
    except BaseException:
        value = None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    print(nonce, json.dumps({"index": index, "value": value}), flush=True)
"""


@dataclass(frozen=True)
class Limits:
    """What one run may use: wall-clock and CPU seconds, address space, bytes of each file and of output,
    processes, its private ``/tmp``, and the network (only when the task grants it)."""

    timeout_s: float = 5.0
    memory_mb: int = 256
    file_mb: int = 10
    output_chars: int = 4000
    per_test_s: float = 1.0
    processes: int = 32
    tmp_mb: int = 64
    network: bool = False


@dataclass(frozen=True)
class RunResult:
    """How one run ended: exit code (``None`` when killed at the timeout), its output (cut to the limit)."""

    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool

    def summary(self) -> str:
        """The tool's answer to the model: how it ended, then stdout and stderr."""
        if self.timed_out:
            head = "timed out (killed)"
        elif self.exit_code is not None and self.exit_code < 0:
            head = f"killed by signal {signal.Signals(-self.exit_code).name} (a limit was exceeded)"
        else:
            head = f"exit code {self.exit_code}"
        return f"{head}\n--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}"


@dataclass(frozen=True)
class TestScore:
    """How many of a task's tests a solution passed."""

    passed: int
    total: int
    error: str | None = None

    @property
    def fraction(self) -> float:
        """``passed / total`` (0.0 without tests)."""
        return self.passed / self.total if self.total else 0.0


@dataclass(frozen=True)
class Check:
    """One test, ``assert expression == expected`` (``is`` when ``identity``), its expected value a literal."""

    expression: str
    expected: Any
    identity: bool = False

    def passed_by(self, reported: str | None) -> bool:
        """Whether the value the child reported (a ``repr``) is the expected literal."""
        if reported is None:
            return False
        try:
            value = ast.literal_eval(reported)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return False  # not a literal: an object of the solution's own making
        if self.identity:
            return type(value) is type(self.expected) and value == self.expected
        return bool(value == self.expected)


def parse_tests(tests: Sequence[str]) -> list[Check]:
    """The checks of ``tests``, statements ``assert EXPR == LITERAL`` or ``assert EXPR is LITERAL``."""
    checks = []
    for test in tests:
        try:
            (statement,) = ast.parse(test).body
            assert isinstance(statement, ast.Assert) and isinstance(statement.test, ast.Compare)
            (operator,), (expected,) = statement.test.ops, statement.test.comparators
            assert isinstance(operator, ast.Eq | ast.Is)
            checks.append(
                Check(ast.unparse(statement.test.left), ast.literal_eval(expected), isinstance(operator, ast.Is))
            )
        except (SyntaxError, ValueError, AssertionError, TypeError) as error:
            raise ValueError(
                f"test {test!r} is not `assert EXPR == LITERAL` (or `is LITERAL`): the expected value must be a "
                "literal, so the solution cannot forge its score"
            ) from error
    return checks


class Sandbox:
    """A working directory of one session and the limits its runs get."""

    def __init__(self, workdir: Path, limits: Limits | None = None) -> None:
        self.workdir = workdir
        self.limits = limits or Limits()
        self._runs = 0

    @classmethod
    def for_session(cls, session_id: str, limits: Limits | None = None) -> Sandbox:
        """A fresh working directory for one rollout, under the session's temporary directory."""
        safe = "".join(c for c in session_id if c.isalnum() or c in "-_")[:64] or "session"
        return cls(Path(tempfile.mkdtemp(prefix=f"coding-{safe}-")), limits)

    def close(self) -> None:
        """Remove the working directory and everything the runs left in it."""
        shutil.rmtree(self.workdir, ignore_errors=True)

    def run(self, code: str) -> RunResult:
        """Run ``code`` as a script in the working directory, under the limits."""
        return self._execute(self._write(code), stdin=None)

    def run_tests(self, solution: str, checks: Sequence[Check]) -> TestScore:
        """Run ``solution``, then evaluate each check's expression under ``Limits.per_test_s``; count the matches."""
        if not checks:
            return TestScore(0, 0, "the task has no tests")
        path = self._write(solution)
        harness = _TEST_HARNESS.replace("__per_test_s__", repr(self.limits.per_test_s)).replace(
            "__solution__", repr(path.name)
        )
        nonce = secrets.token_hex(16)
        expressions = json.dumps([check.expression for check in checks])
        timeout = self.limits.timeout_s + self.limits.per_test_s * len(checks)
        result = self._execute(
            self._write(harness),
            files=(path,),
            stdin=f"{nonce}\n{expressions}",
            timeout_s=timeout,
            whole_output=True,
        )
        reported: dict[int, str | None] = {}
        for line in result.stdout.splitlines():
            marker, _, report = line.partition(" ")
            if marker != nonce:
                continue
            values = json.loads(report)
            if "error" in values:
                return TestScore(0, len(checks), values["error"])
            reported.setdefault(int(values["index"]), values["value"])
        passed = sum(check.passed_by(reported.get(index)) for index, check in enumerate(checks))
        error = None
        if len(reported) < len(checks):
            error = "timed out" if result.timed_out else f"exit code {result.exit_code}: {result.stderr[-300:]}"
            error = f"the tests did not finish ({error})"
        return TestScore(passed, len(checks), error)

    def _write(self, code: str) -> Path:
        self._runs += 1
        path = self.workdir / f"run_{self._runs}.py"
        path.write_text(code, encoding="utf-8")
        return path

    def _execute(
        self,
        script: Path,
        *,
        stdin: str | None,
        files: Sequence[Path] = (),
        timeout_s: float | None = None,
        whole_output: bool = False,
    ) -> RunResult:
        limits = self.limits
        timeout = timeout_s or limits.timeout_s
        confinement = Confinement(
            cpu_s=max(1, int(timeout + 0.999)),
            memory_mb=limits.memory_mb,
            processes=limits.processes,
            file_mb=limits.file_mb,
            tmp_mb=limits.tmp_mb,
            network=limits.network,
            hidden=(str(Path(__file__).parent), os.getcwd()),  # this example's files (the task set), the agent's
        )
        argv = confinement.command([sys.executable, "-I", script.name], scratch=self.workdir, files=(script, *files))
        process = subprocess.Popen(  # noqa: S603 - our interpreter and our start-up program; the model's code is a file
            argv,
            cwd=self.workdir,
            env=clean_environment(),
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            text=True,
        )
        try:
            stdout, stderr = process.communicate(stdin, timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            timed_out = True
        finally:
            try:
                os.killpg(process.pid, signal.SIGKILL)  # anything the code left running in its group
            except ProcessLookupError:
                pass
        cut = limits.output_chars
        stdout = stdout if whole_output else stdout[:cut]  # the harness's reports come after the solution's prints
        return RunResult(None if timed_out else process.returncode, stdout, stderr[-cut:], timed_out)
