"""Stand-in for ``slime/utils/arguments.py``: slime's own arguments, parsed as slime parses them.

``../../slime_arguments.jsonl`` is the table of every argument slime's ``get_slime_extra_args_provider``
adds (flags, dest, action, type, nargs, default; help texts left out), recorded by running that function
on a plain ``argparse`` parser with its GPU-only imports stubbed (see ../../README.md). :func:`parse_args`
rebuilds that parser, parses the given flags (Megatron's and SGLang's own flags are not in it and are
ignored, as slime's second parser ignores SGLang's) and applies the steps of ``slime_validate_args`` that
the rollout path reads (evaluation's dataset resolution is left out).
"""

import argparse
import json
from pathlib import Path

import yaml

TABLE = Path(__file__).parents[2] / "slime_arguments.jsonl"
_ACTIONS = {
    "_StoreAction": "store",
    "_StoreTrueAction": "store_true",
    "_StoreFalseAction": "store_false",
    "_AppendAction": "append",
    "BooleanOptionalAction": argparse.BooleanOptionalAction,
}
_TYPES = {"int": int, "float": float, "str": str, "loads": json.loads}


def slime_parser() -> argparse.ArgumentParser:
    """slime's parser, from the recorded table."""
    parser = argparse.ArgumentParser(allow_abbrev=False)
    for line in TABLE.read_text().splitlines():
        row = json.loads(line)
        kwargs = {"dest": row["dest"], "default": row["default"], "action": _ACTIONS[row["action"]]}
        if row.get("type"):
            kwargs["type"] = _TYPES[row["type"]]
        for name in ("nargs", "choices"):
            if row.get(name) is not None and row["action"] in ("_StoreAction", "_AppendAction"):
                kwargs[name] = row[name]
        parser.add_argument(*row["flags"], **kwargs)
    return parser


def parse_args(argv: list[str]) -> argparse.Namespace:
    """slime's ``args`` for the command line ``argv``: its defaults, the flags, then ``slime_validate_args``'
    steps for evaluation, sampling counts, the ``--custom-config-path`` YAML and prompt lengths."""
    args, _ = slime_parser().parse_known_args(argv)
    if args.eval_function_path is None:
        args.eval_function_path = args.rollout_function_path
    if args.n_samples_per_prompt == 1:
        args.grpo_std_normalization = False
    if args.over_sampling_batch_size is None:
        args.over_sampling_batch_size = args.rollout_batch_size
    if args.custom_config_path:
        for key, value in (yaml.safe_load(Path(args.custom_config_path).read_text()) or {}).items():
            setattr(args, key, value)
    if args.eval_max_context_len is None:
        args.eval_max_context_len = args.rollout_max_context_len
    if args.rollout_max_context_len is not None and args.rollout_max_prompt_len is None:
        args.rollout_max_prompt_len = args.rollout_max_context_len - 1
    return args
