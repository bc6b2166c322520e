"""slime's ``args`` for the slime tests: slime's argument defaults plus the README's flags and a job's own.

Import after putting ``tests/stand_ins/slime`` on ``sys.path`` (slime is not on PyPI; see the README there).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from slime.utils.arguments import parse_args
from tokenizer_support import model_dir

REPO = Path(__file__).parents[2]
#: The README's slime command line; its --custom-config-path is relative to the repository root.
SLIME_COMMAND = REPO / "examples" / "math_agent" / "backends" / "slime.sh"
README_EXPERIMENT = "gsm8k-grpo-1"  # the README YAML's agentcore_experiment


def readme_flags() -> list[str]:
    """The README's slime flags (``"$@"`` is the user's own command line)."""
    words = shlex.split(SLIME_COMMAND.read_text(), comments=True)
    return words[words.index('"$@"') + 1 if '"$@"' in words else words.index("$@") + 1 :]


def slime_args(tmp_path: Path, rows: list[dict], *flags: str, config: dict | None = None) -> Any:
    """slime's ``args`` for a math job on ``rows``: the README's flags, the job's data and batch flags, then
    ``flags``; ``config`` replaces the README's ``--custom-config-path`` YAML."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(row) + "\n" for row in rows))
    argv = [*readme_flags(), "--prompt-data", str(prompts), "--input-key", "prompt", "--label-key", "answer"]
    argv += ["--hf-checkpoint", str(model_dir(tmp_path / "model")), "--num-rollout", "1"]
    argv += ["--rollout-batch-size", str(len(rows)), "--n-samples-per-prompt", "2", *flags]
    if config is not None:
        (tmp_path / "agentcore.yaml").write_text(json.dumps(config))
        argv += ["--custom-config-path", str(tmp_path / "agentcore.yaml")]
    return parse_args(argv)
