"""Three repository snapshots with a failing test each, and the edits a scripted policy chooses among."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Edit:
    """Replace ``old`` with ``new`` in file ``path`` (the policy's action)."""

    path: str
    old: str
    new: str


@dataclass(frozen=True)
class Task:
    """A repository snapshot (path -> text) whose tests (``python3 -m unittest``) fail, and candidate edits."""

    task_id: str
    files: dict[str, str]
    edits: tuple[Edit, ...]


_TEST_HEADER = "import unittest\n\n"

TASKS = (
    Task(
        "clamp",
        {
            "mathutil.py": "def clamp(x, low, high):\n    return max(low, min(x, low))\n",
            "test_mathutil.py": _TEST_HEADER + "from mathutil import clamp\n\n\nclass ClampTest(unittest.TestCase):\n"
            "    def test_inside(self):\n        self.assertEqual(clamp(5, 0, 10), 5)\n\n"
            "    def test_below(self):\n        self.assertEqual(clamp(-1, 0, 10), 0)\n\n"
            "    def test_above(self):\n        self.assertEqual(clamp(11, 0, 10), 10)\n",
        },
        (
            Edit("mathutil.py", "min(x, low)", "min(x, high)"),  # the fix
            Edit("mathutil.py", "max(low,", "min(low,"),
            Edit("mathutil.py", "min(x, low)", "x"),
        ),
    ),
    Task(
        "mean",
        {
            "stats.py": "def mean(xs):\n    return sum(xs) / (len(xs) + 1)\n",
            "test_stats.py": _TEST_HEADER + "from stats import mean\n\n\nclass MeanTest(unittest.TestCase):\n"
            "    def test_one(self):\n        self.assertEqual(mean([4]), 4)\n\n"
            "    def test_many(self):\n        self.assertEqual(mean([1, 2, 3]), 2)\n",
        },
        (
            Edit("stats.py", "(len(xs) + 1)", "len(xs)"),  # the fix
            Edit("stats.py", "sum(xs)", "max(xs)"),
        ),
    ),
    Task(
        "slug",
        {
            "text.py": "def slug(title):\n    return title.lower().replace(' ', '_')\n",
            "test_text.py": _TEST_HEADER + "from text import slug\n\n\nclass SlugTest(unittest.TestCase):\n"
            "    def test_word(self):\n        self.assertEqual(slug('Hello'), 'hello')\n\n"
            "    def test_words(self):\n        self.assertEqual(slug('Hello World'), 'hello-world')\n",
        },
        (
            Edit("text.py", "'_'", "'-'"),  # the fix
            Edit("text.py", ".lower()", ".upper()"),
        ),
    ),
)
