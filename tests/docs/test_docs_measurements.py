"""Measured figures live in result files the benchmarks write, not in the README or the architecture doc (D84)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "docs" / "architecture.md"]
BENCHMARKS = ROOT / "benchmarks"
#: Prose lines longer than this are paragraphs nobody can diff; tables and code blocks are exempt.
MAX_PROSE_LINE = 120
#: How measurements were pinned before: "main at a954985", "at 5ba41ba".
COMMIT_PIN = re.compile(r"\bat [0-9a-f]{7,40}\b")


def prose_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of each line outside fenced code blocks and tables, link targets left out."""
    lines, in_code = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and not line.startswith("|"):
            lines.append((number, re.sub(r"\]\([^)]*\)", "]()", line)))
    return lines


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: path.name)
def test_doc_prose_lines_are_short(doc: Path) -> None:
    # GIVEN the doc / WHEN its prose lines are measured / THEN none is longer than the limit
    long = [f"{doc.name}:{n} ({len(text)} characters)" for n, text in prose_lines(doc) if len(text) > MAX_PROSE_LINE]
    assert not long, f"break these lines at {MAX_PROSE_LINE} characters: {long}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: path.name)
def test_doc_pins_no_measurement_to_a_commit(doc: Path) -> None:
    # GIVEN the doc / WHEN it is searched for figures pinned to a commit / THEN there are none
    pinned = [f"{doc.name}:{n}" for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1)
              if COMMIT_PIN.search(line)]  # fmt: skip
    assert not pinned, f"measured figures go to benchmarks/results/ (D84), not the docs: {pinned}"


def test_every_benchmark_is_listed_and_writes_a_result_file() -> None:
    # GIVEN the benchmark scripts and benchmarks/README.md
    listing = (BENCHMARKS / "README.md").read_text(encoding="utf-8")
    for script in sorted(BENCHMARKS.glob("*_bench.py")):
        # THEN each is listed there, and calls the shared writer
        assert f"`{script.name}" in listing, f"{script.name} is not listed in benchmarks/README.md"
        assert "results.begin(" in script.read_text(encoding="utf-8"), f"{script.name} writes no result file"


def test_every_linked_result_file_exists_and_says_where_it_was_measured() -> None:
    # GIVEN every result file the docs link
    linked = set()
    for doc in [*DOCS, BENCHMARKS / "README.md"]:
        for target in re.findall(r"\]\(([^)]*results/[^)]+\.json)\)", doc.read_text(encoding="utf-8")):
            linked.add((doc.parent / target).resolve())
    assert linked
    for path in sorted(linked):
        # THEN it exists and records the figures with the commit, machine and load
        assert path.is_file(), f"{path.relative_to(ROOT)} is linked but missing: run its benchmark"
        record = json.loads(path.read_text(encoding="utf-8"))
        assert {"figures", "commit", "machine", "load", "command", "date"} <= record.keys(), path.name
