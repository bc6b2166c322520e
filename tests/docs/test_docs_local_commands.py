"""Every local command the docs quote runs after ``make demo`` alone, or says which install it needs first.

``make demo`` builds ``.venv-demo`` (the twin and the examples), not ``.venv`` (``make install``: CDK, linters, test
tools), and puts nothing on ``PATH``. So a quoted command that runs ``.venv/bin/...`` must sit in a block or line that
says ``make install`` first, and a bare ``python`` running this repository's code must be ``.venv-demo/bin/python``.
The tested blocks (``<!-- test: NAME -->``) run as written from ``.venv-demo`` in ``tests/e2e``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted({ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("examples/**/*.md")})
BLOCK = re.compile(r"```(?:bash|sh|shell)\n(.*?)```", re.DOTALL)
#: A line running this repository's Python without naming the environment (``python -m examples.x``).
BARE_PYTHON = re.compile(
    r"^(?:[A-Z_]+=\S+\s+)*python3?\s+(?:-m\s+)?(?:examples|local_stack|trainer_client|agent_app)\b"
)
TESTED = ["try-it", "swe-sandbox", "from-art-local", "coding-local-up"]


def blocks(path: Path) -> list[str]:
    return BLOCK.findall(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: str(doc.relative_to(ROOT)))
def test_each_quoted_local_command_runs_from_the_demo_environment_or_names_its_install(doc: Path) -> None:
    wrong = []
    for block in blocks(doc):
        for line in block.splitlines():
            command = line.strip()
            if command.startswith(".venv/bin/") and "make install" not in block:
                wrong.append(f"{command}  (needs `make install`: say so, or use .venv-demo/bin/)")
            elif BARE_PYTHON.match(command) and ".backends." not in command:  # launchers run in the framework's env
                wrong.append(f"{command}  (bare python: use .venv-demo/bin/python)")
    assert wrong == [], f"{doc.relative_to(ROOT)}:\n" + "\n".join(wrong)


def test_the_tested_blocks_run_from_the_demo_environment() -> None:
    text = "\n".join(doc.read_text(encoding="utf-8") for doc in DOCS)
    for name in TESTED:
        found = re.search(rf"<!-- test: {name} -->\n```bash\n(.*?)```", text, re.DOTALL)
        assert found is not None, f"the docs lost their tested block {name!r}"
        assert ".venv-demo/bin/" in found.group(1) and ".venv/bin/" not in found.group(1), name
