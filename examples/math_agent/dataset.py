"""Math datasets as rows ``{"idx", "prompt", "answer", "data_source"}``: synthetic, GSM8K, JSONL files."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from examples.math_agent.reward import extract_final_answer
from local_stack.problems import generate_problems

__all__ = ["GSM8K_SOURCE", "load_gsm8k_jsonl", "read_jsonl", "synthetic", "write_jsonl"]

GSM8K_SOURCE = "gsm8k"
ROW_FIELDS = ("idx", "prompt", "answer", "data_source")


def synthetic(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """Return ``n`` generated GSM8K-style problems, the same for the same ``seed``.

    They are the local stand-in model's word problems (:mod:`local_stack.problems`), so the
    demo runs them offline; a real model reads them as any GSM8K question.
    """
    if n < 0:
        raise ValueError(f"n must be zero or more, got {n}")
    return generate_problems(n, seed)


def load_gsm8k_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Read a GSM8K JSONL file (``question``, and ``answer`` ending in ``#### N``) as dataset rows.

    Raises:
        ValueError: a line is not JSON, lacks a field, or its answer has no ``#### N``; the message
            names the file and line.
    """
    rows: list[dict[str, Any]] = []
    for line_no, record in _records(Path(path)):
        question, answer = record.get("question"), record.get("answer")
        if not isinstance(question, str) or not isinstance(answer, str):
            raise ValueError(f"{path}:{line_no}: expected string fields 'question' and 'answer' (GSM8K format)")
        final = extract_final_answer(answer)
        if final is None:
            raise ValueError(f"{path}:{line_no}: the answer does not end in '#### <number>'")
        rows.append(
            {
                "idx": len(rows),
                "prompt": question,
                "answer": str(int(final)) if final.is_integer() else str(final),
                "data_source": GSM8K_SOURCE,
            }
        )
    return rows


def write_jsonl(rows: Iterable[dict[str, Any]], path: str | Path) -> Path:
    """Write dataset rows to ``path``, one JSON object a line (parent folders are created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps({name: row[name] for name in ROW_FIELDS}) + "\n")
    return path


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Read rows written by :func:`write_jsonl`.

    Raises:
        ValueError: a line is not JSON or lacks one of the row fields; the message names the file and line.
    """
    rows = []
    for line_no, record in _records(Path(path)):
        missing = [name for name in ROW_FIELDS if name not in record]
        if missing:
            raise ValueError(f"{path}:{line_no}: missing {', '.join(missing)}")
        rows.append(record)
    return rows


def _records(path: Path) -> Iterable[tuple[int, dict[str, Any]]]:
    with path.open(encoding="utf-8") as lines:
        for line_no, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{line_no}: not JSON ({exc.msg})") from exc
            if not isinstance(record, dict):
                raise ValueError(f"{path}:{line_no}: expected a JSON object")
            yield line_no, record
