"""What the local stack hosts, given by its caller: the agent (:class:`LocalAgent`) and the demo (:class:`DemoTask`).

``local_stack`` knows no agent of its own: the ``rollouts`` command passes the example math agent
(``examples.math_agent.local``), tests and benchmarks pass theirs. Light on purpose: the CLI imports it to
mount its commands.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from local_stack.stack import StackSettings

__all__ = ["DEFAULT_AGENT_NAME", "DEFAULT_MODEL_NAME", "DemoTask", "LocalAgent", "validate_agent_name"]

#: The runtime name of an agent given only as ``StackSettings.agent_command``.
DEFAULT_AGENT_NAME = "agent"
#: The one name of the local stack's model: what its endpoint lists, what its descriptor tells trainers that name
#: no model, and what the demo sends.
DEFAULT_MODEL_NAME = "stand-in"
# ACR's rule for an agent runtime's name (CreateAgentRuntime's agentRuntimeName).
_AGENT_NAME_RE = re.compile(r"[a-zA-Z][a-zA-Z0-9_]{0,47}")


def validate_agent_name(name: str) -> str:
    """Return ``name`` if ACR accepts it as an agent runtime's name.

    Raises:
        ValueError: the name breaks ACR's rule (a letter, then letters, digits or ``_``; 48 at most).
    """
    if not _AGENT_NAME_RE.fullmatch(name):
        raise ValueError(
            f"agent name {name!r} is not an AgentCore runtime name: use a letter, then letters, digits or '_' "
            "(48 characters at most)"
        )
    return name


@dataclass(frozen=True)
class LocalAgent:
    """An agent for the ACR emulator to host, one runtime per experiment (ARN ``runtime/<name>-<exp_id>``).

    Attributes:
        name: the runtime's name (ACR's rule, see :func:`validate_agent_name`).
        command: the process each session runs; it listens on ``PORT``.
        preload: modules the emulator's fork server imports once, so sessions start without importing them.
        working_dir: where every session's process starts (default: the project's root).
        environment: variables every session's process gets on top of the stack's (``PYTHONPATH`` is put
            before the stack's, the others replace it).
        requires: ``_rollout`` fields the agent needs (``model_id``, ``base_url``): published in the descriptor,
            so a trainer's submit without them is refused instead of failing in the agent.
    """

    name: str
    command: tuple[str, ...]
    preload: tuple[str, ...] = ()
    working_dir: Path | None = None
    environment: Mapping[str, str] = field(default_factory=dict)
    requires: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        validate_agent_name(self.name)
        if not self.command:
            raise ValueError(f"agent {self.name!r} has no command: give the argv its sessions run")
        if self.working_dir is not None:
            object.__setattr__(self, "working_dir", Path(os.fspath(self.working_dir)))

    def settings(self, **fields: Any) -> StackSettings:
        """Return ``StackSettings(**fields)`` hosting this agent (``runtime_options`` are merged over the preload)."""
        from local_stack.stack import StackSettings

        runtime_options = {"preload": self.preload, **fields.pop("runtime_options", {})}
        return StackSettings(
            agent_name=self.name,
            agent_command=self.command,
            agent_working_dir=self.working_dir,
            agent_environment=dict(self.environment),
            required_rollout_fields=self.requires,
            runtime_options=runtime_options,
            **fields,
        )


@dataclass(frozen=True)
class DemoTask:
    """What ``rollouts demo`` runs: an agent and a dataset of rollouts for it.

    Attributes:
        agent: the agent the stack hosts.
        dataset: ``(count, seed) -> [(input_id, payload), ...]``, ``count`` prompts, the same for the same seed.
        model_id: the model name sent to the endpoint unless the command line gives one (the descriptor's
            default when ``None``).
        default_prompts: how many prompts the demo runs unless the command line says.
    """

    agent: LocalAgent
    dataset: Callable[[int, int], Sequence[tuple[str, Mapping[str, Any]]]]
    model_id: str | None = None
    default_prompts: int = 16
