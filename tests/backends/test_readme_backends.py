"""The README's "Training backends" blocks are the files the backend tests run (examples/math_agent/backends/)."""

import re
from pathlib import Path

REPO = Path(__file__).parents[2]
BACKENDS = REPO / "examples" / "math_agent" / "backends"
#: A quoted file: its path in backticks and a colon, then a fenced block.
QUOTED = re.compile(r"`(examples/math_agent/backends/[^`]+)`:\n```[a-z]*\n(.*?)```\n", re.DOTALL)


def _section() -> str:
    readme = (REPO / "README.md").read_text()
    return readme[readme.index("## Training backends\n") : readme.index("## Deploying to AWS\n")]


def test_every_block_the_readme_quotes_is_its_file_and_every_file_is_quoted():
    quoted = {path: text for path, text in QUOTED.findall(_section())}
    files = {
        str(path.relative_to(REPO)) for path in BACKENDS.iterdir() if path.is_file() and path.name != "__init__.py"
    }
    assert set(quoted) == files
    for path, text in quoted.items():
        assert text == (REPO / path).read_text(), f"the README's block of {path} is not the file"
