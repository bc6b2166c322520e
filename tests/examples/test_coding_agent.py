"""The coding agent's parts: the sandbox's limits, the test score, the agent loop on the scripted stand-in."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from pathlib import Path

import httpx
import pytest

from agent_app.confinement import SANDBOX_GID, SANDBOX_UID
from examples.coding_agent.sandbox import Limits, Sandbox, parse_tests
from local_stack.model_endpoint import EndpointSettings, create_app

EXAMPLE = Path(__file__).parents[2] / "examples" / "coding_agent"
TASKS = [json.loads(line) for line in (EXAMPLE / "tasks.jsonl").read_text().splitlines()]
SCRIPT = json.loads((EXAMPLE / "stand_in.json").read_text())


@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    return Sandbox(tmp_path, Limits(timeout_s=1, memory_mb=128, per_test_s=0.5))


def _interpreter_mounts_in(directory: str) -> list[str]:
    """What of the interpreter's folders the strict confinement binds back into the private ``directory`` (a checkout
    under ``/tmp``, as a CI clone may be, shows its top folder there), as ``os.listdir`` names it."""
    if os.geteuid() != 0:
        return []
    prefixes = {os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix)}
    return sorted({Path(p).relative_to(directory).parts[0] for p in prefixes if Path(p).is_relative_to(directory)})


def test_code_runs_in_a_fresh_directory_of_its_own_and_its_output_comes_back(sandbox: Sandbox) -> None:
    mounts = _interpreter_mounts_in("/tmp")
    code = (
        "import os\n"
        f"print(sorted(set(os.listdir()) - set({mounts!r})), os.environ['TMPDIR'] == os.getcwd())\n"
        "raise SystemExit(3)"
    )
    result = sandbox.run(code)
    second = sandbox.run(code)
    assert (result.exit_code, result.stdout.strip(), result.timed_out) == (3, "['run_1.py'] True", False)
    assert second.stdout.strip() == "['run_2.py'] True"  # nothing of the first run left in it


@pytest.mark.skipif(os.geteuid() != 0, reason="the strict isolation needs root (D101)")
def test_the_models_code_runs_as_another_user_without_the_agents_files_environment_or_network(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a secret in the agent's environment and a server the agent can reach
    monkeypatch.setenv("AGENT_SECRET", "s3cr3t")
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        # WHEN the model's code looks around
        result = sandbox.run(
            "import os, socket\n"
            "print(os.getuid(), os.getgid(), os.getgroups(), sorted(os.environ))\n"
            f"print(os.path.exists({str(EXAMPLE / 'tasks.jsonl')!r}), [p for p in os.listdir('/proc') if p[0] < 'a'])\n"
            f"socket.create_connection(('127.0.0.1', {port}), timeout=1)\n"
        )
    # THEN it ran as the sandbox user, with a clean environment, its own /proc, no task set and no network
    uid, files, *_ = result.stdout.splitlines()
    assert uid == f"{SANDBOX_UID} {SANDBOX_GID} [] ['HOME', 'LANG', 'PATH', 'TMPDIR']"
    assert files == "False ['1']"  # the agent's processes are not in its /proc
    assert result.exit_code == 1 and "Error" in result.stderr.splitlines()[-1]
    assert "s3cr3t" not in result.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="the strict isolation needs root (D101)")
def test_a_fork_bomb_stops_at_the_process_limit_and_leaves_nothing_behind(sandbox: Sandbox) -> None:
    bomb = "import os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n            os.setsid()\n"
    bomb += "            time.sleep(60)\n            os._exit(0)\n        n += 1\nexcept OSError:\n    print(n)\n"
    result = sandbox.run(bomb)
    assert result.exit_code == 0 and int(result.stdout) < Limits().processes
    assert not [p for p in Path("/proc").glob("[0-9]*") if p.stat().st_uid == SANDBOX_UID]


def test_a_loop_is_killed_at_the_time_limit(sandbox: Sandbox) -> None:
    result = sandbox.run("while True:\n    pass\n")
    assert result.timed_out and result.exit_code is None
    assert result.summary().startswith("timed out (killed)")


def test_an_allocation_beyond_the_memory_limit_fails_in_the_child(sandbox: Sandbox) -> None:
    result = sandbox.run("block = bytearray(512 * 1024 * 1024)\nprint('allocated')")
    assert result.exit_code == 1 and "MemoryError" in result.stderr and "allocated" not in result.stdout


def test_output_beyond_the_limit_is_cut(tmp_path: Path) -> None:
    result = Sandbox(tmp_path, Limits(output_chars=100)).run("print('x' * 10_000)")
    assert len(result.stdout) == 100


def test_the_score_is_the_fraction_of_tests_passed_and_a_looping_test_only_fails_itself(sandbox: Sandbox) -> None:
    solution = "def double(x):\n    if x < 0:\n        while True: pass\n    return x * 2\n"
    tests = ["assert double(1) == 2", "assert double(2) == 5", "assert double(-1) == -2", "assert double(0) is 0"]
    score = sandbox.run_tests(solution, parse_tests(tests))
    assert (score.passed, score.total, score.fraction, score.error) == (2, 4, 0.5, None)


def test_a_value_is_compared_as_the_literal_it_is(sandbox: Sandbox) -> None:
    solution = "def f(x):\n    return {'n': x, 'flag': x > 1, 'items': [str(x)] * x}\n"
    tests = ["assert f(2) == {'n': 2, 'flag': True, 'items': ['2', '2']}", "assert f(2)['flag'] is True",
             "assert f(1)['flag'] is 0", "assert f(0)['items'] == []"]  # fmt: skip
    assert sandbox.run_tests(solution, parse_tests(tests)).passed == 3


@pytest.mark.parametrize(
    "forged",
    [
        # looks for the expected value everywhere in its process: every frame's names, every container
        "import gc, re, sys\ndef f():\n    pattern = re.compile('secret-[0-9a-f]{4}')\n    texts = []\n"
        "    frame = sys._getframe()\n    while frame is not None:\n"
        "        texts += [repr(v) for v in (*frame.f_globals.values(), *frame.f_locals.values())]\n"
        "        frame = frame.f_back\n"
        "    texts += [repr(o) for o in gc.get_objects() if isinstance(o, (list, tuple, dict))]\n"
        "    return next((m.group(0) for t in texts for m in [pattern.search(t)] if m), None)\n",
        # an object equal to everything
        "class Anything:\n    def __eq__(self, other):\n        return True\n    def __repr__(self):\n"
        "        return 'Anything()'\ndef f():\n    return Anything()\n",
        # no assert can fail: AssertionError made harmless
        "import builtins\nbuiltins.AssertionError = type('Never', (Exception,), {})\ndef f():\n    return 0\n",
    ],
    ids=["search-its-process", "equal-to-everything", "assertion-error-replaced"],
)
def test_a_solution_cannot_forge_its_score(sandbox: Sandbox, forged: str) -> None:
    assert sandbox.run_tests(forged, parse_tests(["assert f() == 'secret-7f3a'"])).passed == 0


def test_a_test_whose_expected_value_is_not_a_literal_is_refused() -> None:
    with pytest.raises(ValueError, match=r"is not `assert EXPR == LITERAL`"):
        parse_tests(["assert f(1) == g(1)"])
    with pytest.raises(ValueError, match="the expected value must be a literal"):
        parse_tests(["assert f(1)"])


def test_a_solution_that_raises_at_import_scores_zero_with_its_error(sandbox: Sandbox) -> None:
    score = sandbox.run_tests("raise ValueError('bad')", parse_tests(["assert True is True"]))
    assert (score.passed, score.error) == (0, "ValueError('bad')")


@pytest.mark.processes  # 32 child interpreters
def test_the_bundled_script_answers_every_task_and_gives_each_group_a_spread_of_rewards(sandbox: Sandbox) -> None:
    from examples.coding_agent.agent import extract_code  # here: the OpenAI SDK takes 1.4 s to import

    # GIVEN the task set and the stand-in's script (two files kept apart: payloads and model answers)
    for conversation, task in zip(SCRIPT["conversations"], TASKS, strict=True):
        assert conversation["match"] in task["prompt"]
        # WHEN each scripted answer's final code is scored
        fractions = [
            sandbox.run_tests(extract_code(answer[-1]["content"]) or "", parse_tests(task["tests"])).fraction
            for answer in conversation["answers"]
        ]
        # THEN the first answer solves the task and some answer does not (GRPO needs a spread)
        assert fractions[0] == 1.0, task["id"]
        assert min(fractions) < 1.0, task["id"]


def test_the_agent_runs_the_tools_the_model_calls_and_answers_over_several_turns(tmp_path: Path) -> None:
    from openai import AsyncOpenAI  # here: the SDK takes 1.4 s to import

    from examples.coding_agent.agent import solve

    # GIVEN the stand-in model with the example's script, answering at temperature 0 (its first answer)
    model = create_app(EndpointSettings(script=EXAMPLE / "stand_in.json"))
    task = TASKS[0]

    async def attempt() -> object:
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=model))
        client = AsyncOpenAI(base_url="http://model/v1", api_key="EMPTY", http_client=http)
        async with client:
            return await solve(
                task["prompt"],
                client=client,
                model_id="stand-in",
                sandbox=Sandbox(tmp_path),
                sampling_params={"temperature": 0.0},
            )

    # WHEN the agent works on the first task
    result = asyncio.run(attempt())
    # THEN it ran the model's code once, read its output, and answered with the function on turn two
    assert (result.turns, result.tool_calls, result.finish) == (2, 1, "answered")
    assert Sandbox(tmp_path).run_tests(result.solution, parse_tests(task["tests"])).fraction == 1.0
    assert list(tmp_path.glob("run_*.py"))
