"""The word problems the stand-in model solves: its input format, and a seeded generator of them.

Six templates of GSM8K-style arithmetic word problems, each with the integer expression of its numbers that
answers it. :func:`generate_problems` renders dataset rows; :func:`parse_problem` recovers the expression
from a problem's text, which is how the stand-in model's policy (:mod:`local_stack.model_endpoint.policy`)
"solves" them offline (a real model reads the text instead). Any other text is not a problem to it.
Datasets built on these rows (e.g. ``examples.math_agent.dataset.synthetic``) are ones the stand-in can run.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from typing import NamedTuple

__all__ = ["DATA_SOURCE", "Problem", "generate_problems", "parse_problem"]

DATA_SOURCE = "synthetic-gsm8k"

_NAMES = ("Ava", "Ben", "Chloe", "Diego", "Emma", "Farid", "Grace", "Hiro", "Isla", "Jon", "Kemi", "Liam")
_ITEMS = ("apples", "marbles", "stickers", "books", "pencils", "cookies", "stamps", "shells")


class _Template(NamedTuple):
    text: str  # str.format template with {name}, {item} and {a}, {b}, {c}
    expression: str  # the same placeholders, as arithmetic over a, b, c
    ranges: tuple[tuple[int, int], tuple[int, int], tuple[int, int]]
    valid: Callable[[int, int, int], bool] = lambda a, b, c: True


_TEMPLATES = (
    _Template(
        "{name} has {a} {item}. {name} buys {b} bags with {c} {item} in each bag. "
        "How many {item} does {name} have now?",
        "{a} + {b} * {c}",
        ((5, 60), (2, 9), (3, 12)),
    ),
    _Template(
        "{name} had {a} {item} and gave {b} of them to each of {c} friends. How many {item} are left?",
        "{a} - {b} * {c}",
        ((40, 200), (2, 9), (2, 6)),
        lambda a, b, c: a - b * c >= 0,
    ),
    _Template(
        "{name} packs {a} {item} equally into {b} boxes and then adds {c} more {item} to each box. "
        "How many {item} are in one box?",
        "{a} // {b} + {c}",
        ((12, 120), (2, 12), (1, 9)),
        lambda a, b, c: a % b == 0,
    ),
    _Template(
        "A shop sells {item} at {a} dollars each. {name} buys {b} of them and pays with {c} dollars. "
        "How much change does {name} get?",
        "{c} - {a} * {b}",
        ((2, 15), (2, 8), (50, 200)),
        lambda a, b, c: c - a * b >= 0,
    ),
    _Template(
        "{name} reads {a} pages a day for {b} days and then {c} pages on the last day. "
        "How many pages does {name} read in total?",
        "{a} * {b} + {c}",
        ((5, 40), (3, 14), (1, 30)),
    ),
    _Template(
        "There are {a} rows of {b} chairs in a hall. {c} chairs are taken away. How many chairs remain?",
        "{a} * {b} - {c}",
        ((3, 20), (4, 25), (1, 30)),
        lambda a, b, c: a * b - c >= 0,
    ),
)

_PATTERNS = tuple(
    re.compile(
        "^"
        + re.escape(t.text)
        .replace(re.escape("{name}"), r"(?P<name>\w+)", 1)
        .replace(re.escape("{name}"), r"(?P=name)")
        .replace(re.escape("{item}"), r"(?P<item>\w+)", 1)
        .replace(re.escape("{item}"), r"(?P=item)")
        .replace(re.escape("{a}"), r"(?P<a>\d+)")
        .replace(re.escape("{b}"), r"(?P<b>\d+)")
        .replace(re.escape("{c}"), r"(?P<c>\d+)")
        + "$"
    )
    for t in _TEMPLATES
)


class Problem(NamedTuple):
    """A parsed problem: the arithmetic expression that answers it, and its value."""

    expression: str
    answer: int


def _evaluate(expression: str) -> int:
    """Evaluate one of the templates' expressions (integers, + - * //, no names)."""
    if not re.fullmatch(r"[\d\s+\-*/]+", expression):
        raise ValueError(f"not a template expression: {expression!r}")
    return int(eval(expression, {"__builtins__": {}}, {}))  # noqa: S307 - digits and operators only


def generate_problems(n: int, seed: int = 0) -> list[dict[str, str | int]]:
    """Return ``n`` rows ``{"idx", "prompt", "answer", "data_source"}``, the same for the same seed."""
    rng = random.Random(seed)
    rows: list[dict[str, str | int]] = []
    while len(rows) < n:
        template = _TEMPLATES[len(rows) % len(_TEMPLATES)]
        a, b, c = (rng.randint(lo, hi) for lo, hi in template.ranges)
        if not template.valid(a, b, c):
            continue
        fields = {"name": rng.choice(_NAMES), "item": rng.choice(_ITEMS), "a": a, "b": b, "c": c}
        answer = _evaluate(template.expression.format(**fields))
        rows.append(
            {
                "idx": len(rows),
                "prompt": template.text.format(**fields),
                "answer": str(answer),
                "data_source": DATA_SOURCE,
            }
        )
    return rows


def parse_problem(text: str) -> Problem | None:
    """Recover the expression of a generated problem from its text; ``None`` for any other text."""
    text = text.strip()
    for template, pattern in zip(_TEMPLATES, _PATTERNS, strict=True):
        match = pattern.match(text)
        if match:
            expression = template.expression.format(**match.groupdict())
            return Problem(expression, _evaluate(expression))
    return None
