"""One episode of the trainer's agent loop in a sandbox: set up the repository, act, run the tests, score."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from examples.swe_sandbox.tasks import Edit, Task

#: Writes the files given as JSON (path -> text) under the sandbox's working directory.
_WRITE_FILES = (
    "import json, pathlib, sys\n"
    "for path, text in json.loads(sys.argv[1]).items():\n"
    "    target = pathlib.Path(path)\n"
    "    target.parent.mkdir(parents=True, exist_ok=True)\n"
    "    target.write_text(text)\n"
)
#: Applies one edit (path, old, new): exit 1 when ``old`` is not in the file.
_APPLY_EDIT = (
    "import pathlib, sys\n"
    "path, old, new = sys.argv[1:4]\n"
    "text = pathlib.Path(path).read_text()\n"
    "if old not in text:\n"
    "    sys.exit(f'{old!r} not in {path}')\n"
    "pathlib.Path(path).write_text(text.replace(old, new, 1))\n"
)
#: The repository's tests; ``-B``: no bytecode cache, whose timestamp check (whole seconds and size) would let an
#: edit made within the second of the first run go unseen.
TEST_COMMAND = ["python3", "-B", "-m", "unittest", "-q"]
_RAN = re.compile(r"^Ran (\d+) tests?", re.MULTILINE)
_FAILED = re.compile(r"^FAILED \((.*)\)$", re.MULTILINE)


@dataclass(frozen=True)
class Episode:
    """What one episode did and earned."""

    task_id: str
    edit: Edit
    tests_before: float
    reward: float


def pass_fraction(unittest_output: str) -> float:
    """The fraction of tests that passed, from ``unittest``'s summary (0.0 when none ran)."""
    ran = _RAN.search(unittest_output)
    if ran is None or int(ran.group(1)) == 0:
        return 0.0
    failed = _FAILED.search(unittest_output)
    counts = dict(part.split("=") for part in failed.group(1).split(", ")) if failed else {}
    bad = int(counts.get("failures", 0)) + int(counts.get("errors", 0))
    return 1.0 - bad / int(ran.group(1))


def run_tests(sandbox: Any) -> float:
    """Run the repository's tests in the sandbox; the fraction passing."""
    result = sandbox.exec(TEST_COMMAND, timeout=120)
    return pass_fraction(result.stderr)


#: A policy: the task and the fraction of its tests passing now -> the edit to make.
Policy = Callable[[Task, float], Edit]


def scripted_policy(rng: random.Random) -> Policy:
    """A stand-in for a model: one of the task's candidate edits, at random (the tests' result is not used)."""
    return lambda task, passing: rng.choice(task.edits)


def run_episode(sandbox: Any, task: Task, policy: Policy) -> Episode:
    """Copy ``task``'s snapshot into ``sandbox``, run its tests, apply the policy's edit, and score the tests."""
    setup = sandbox.exec(["python3", "-c", _WRITE_FILES, json.dumps(task.files)])
    if setup.exit_code != 0:
        raise RuntimeError(f"could not write {task.task_id}'s files in the sandbox: {setup.stderr}")
    before = run_tests(sandbox)
    edit = policy(task, before)
    applied = sandbox.exec(["python3", "-c", _APPLY_EDIT, edit.path, edit.old, edit.new])
    reward = run_tests(sandbox) if applied.exit_code == 0 else 0.0
    return Episode(task.task_id, edit, before, reward)
