"""slime for the slime tests: which slime tree, its ``args``, one rollout step converted to training data.

slime is not on PyPI: the tests import the stand-ins in ``tests/stand_ins/slime``, or the real slime tree named
by ``AGENTCORE_STAND_INS_SLIME`` (see the README there). Importing this module puts that tree first on
``sys.path``. Only what imports without GPUs is used from it (``slime.utils.types``, ``slime.rollout.*``,
``slime.utils.dp_schedule``, ``slime.observability.rollout_data_utils``); slime's argument parsing and its
``RolloutManager`` import SGLang, so ``args`` come from the recorded argument table and the rollout-to-train
conversion is the stand-in's rewrite of slime's (both loaded by file path, running on the chosen slime's types).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).parents[2]
STAND_IN = REPO / "tests" / "stand_ins" / "slime"
#: Environment variable naming a slime tree to test against instead of the stand-ins.
SLIME_TREE_VARIABLE = "AGENTCORE_STAND_INS_SLIME"
SLIME_TREE = Path(os.environ.get(SLIME_TREE_VARIABLE) or STAND_IN)
sys.path.insert(0, str(SLIME_TREE))

import slime  # noqa: E402
from tokenizer_support import model_dir  # noqa: E402

if Path(slime.__file__).parents[1].resolve() != SLIME_TREE.resolve():
    raise ImportError(
        f"slime was imported from {slime.__file__} before slime_support could put {SLIME_TREE} first: "
        f"run the slime test files alone with {SLIME_TREE_VARIABLE}={SLIME_TREE}"
    )

#: The README's slime command line; its --custom-config-path is relative to the repository root.
SLIME_COMMAND = REPO / "examples" / "math_agent" / "backends" / "slime.sh"
README_EXPERIMENT = "gsm8k-grpo-1"  # the README YAML's agentcore_experiment


def _stand_in_module(name: str, relative: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, STAND_IN / relative)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: slime's argument table and the steps of ``slime_validate_args`` the rollout path reads (``parse_args``).
arguments = _stand_in_module("slime_argument_table", "slime/utils/arguments.py")
#: slime's ``RolloutManager`` conversion (its data source, rollout function and reward hook as slime loads them).
manager_module = _stand_in_module("slime_rollout_manager", "slime/ray/rollout.py")


def parse_args(argv: list[str]) -> Any:
    """slime's ``args`` for the command line ``argv`` (its own flags; Megatron's and SGLang's are ignored)."""
    return arguments.parse_args(argv)


def rollout_manager(args: Any) -> Any:
    """slime's rollout manager without Ray: ``.data_source``, ``.generate(rollout_id)`` ->
    ``(train_data, metrics)``, ``.eval(rollout_id)``, ``._convert_samples_to_train_data(samples)``."""
    return manager_module.RolloutManager(args)


def dp_schedule(args: Any, train_data: dict[str, Any], dp_size: int) -> tuple[list[list[int]], list[int]]:
    """How slime's ``build_dp_schedule`` splits ``train_data`` over ``dp_size`` ranks: per rank its sample
    indices, per step its micro-batches per rank."""
    from slime.utils.dp_schedule import build_dp_schedule

    parallel = {"dp_size": dp_size, "cp_size": 1, "vpp_size": 1, "microbatch_group_size_per_vp_stage": 1}
    partitions, _, num_microbatches, _ = build_dp_schedule(
        args,
        parallel,
        [len(tokens) for tokens in train_data["tokens"]],
        global_batch_size=args.global_batch_size,
        rollout_indices=train_data["rollout_ids"],
    )
    return partitions, num_microbatches


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
