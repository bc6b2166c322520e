"""The math agent on the local stack: what ``rollouts demo`` and ``rollouts local up`` host, and the demo's dataset.

``local_stack`` knows no agent of its own; the ``rollouts`` command passes :data:`MATH_DEMO` to it.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from local_stack.hosting import DEFAULT_MODEL_NAME, DemoTask, LocalAgent

__all__ = ["MATH_AGENT", "MATH_DEMO", "demo_dataset"]

#: The RL form of the agent as the emulator runs it. Its sessions are forked from a process that imported
#: the agent's libraries once (the emulator's fork-server mode), instead of once per session (about 1 s of CPU).
MATH_AGENT = LocalAgent(
    name="math_agent",
    command=(sys.executable, str(Path(__file__).with_name("rl_app.py"))),
    preload=("agent_app.preload", "strands", "strands.models.openai", "examples.math_agent.agent"),
    requires=("base_url", "model_id"),
)


def demo_dataset(count: int, seed: int) -> list[tuple[str, Mapping[str, Any]]]:
    """``count`` synthetic problems as ``(input_id, payload)``: the ones the local stand-in model solves."""
    # Imported here: the dataset's reward helpers need the agent extra, and the CLI imports this module to mount
    # its commands with only the trainer extra installed.
    from examples.math_agent.dataset import synthetic

    rows = synthetic(count, seed)
    return [(f"problem-{row['idx']}", {"prompt": row["prompt"], "answer": row["answer"]}) for row in rows]


MATH_DEMO = DemoTask(agent=MATH_AGENT, dataset=demo_dataset, model_id=DEFAULT_MODEL_NAME)
