"""The local twin as installed: ``local_stack``, ``lambdas`` and ``examples`` under a name of its own.

A wheel puts those three packages inside this folder instead of at the top of site-packages, where their generic
names would shadow a user's own (rLLM's documented ``python -m examples.agentcore_math...`` for one). Importing
this module puts the folder on ``sys.path``, so the twin's processes import them by their repository names,
as the Lambda runtime puts a function's package on its path; the stack hands the same folder to its child
processes in ``PYTHONPATH``. In a checkout the three packages sit beside this folder, at the repository's root.

The ``rollouts`` command finds the twin's commands through the ``agentcore_rollouts.commands`` entry point
group (:func:`add_commands`); the trainer SDK never imports the twin.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["TWIN_ROOT", "add_commands"]

_HERE = Path(__file__).resolve().parent
#: The folder that holds ``local_stack``, ``lambdas`` and ``examples``: this one in a wheel, the checkout's root
#: in a repository.
TWIN_ROOT = _HERE if (_HERE / "local_stack").is_dir() else _HERE.parent

if str(TWIN_ROOT) not in sys.path:
    sys.path.append(str(TWIN_ROOT))


def add_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Mount ``rollouts local ...`` and ``rollouts demo`` (the bundled math agent is the default agent)."""
    from examples.math_agent.local import MATH_DEMO
    from local_stack.cli import add_commands as add_local_commands

    add_local_commands(subparsers, demo=MATH_DEMO)
