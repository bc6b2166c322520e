"""The local stack hosting ART's sandbox daemon (``agent_app.sandbox``): sandbox experiments with no AWS account.

Each sandbox session is its own process (forked from a template that imported the server once), started in a
fresh directory of its own, under the session's time limits (idle timeout, maximum lifetime; each command its
own timeout) and a memory limit (:data:`SANDBOX_MEMORY_MB` per process).
"""

from __future__ import annotations

import sys
from typing import Any

from local_stack.stack import StackSettings
from rollout_contract.resources import ExperimentKind

__all__ = ["SANDBOX_AGENT_NAME", "SANDBOX_MEMORY_MB", "sandbox_settings"]

#: The sandbox runtime's name: its ARN is ``runtime/sandbox-<exp_id>``.
SANDBOX_AGENT_NAME = "sandbox"
#: The address space each process of a sandbox session may map, in MiB (ACR's microVM has 8 GB in all).
SANDBOX_MEMORY_MB = 4096
#: What the fork server's template imports once, so a sandbox session starts without importing the server.
_PRELOAD = ("uvicorn", "starlette", "bedrock_agentcore.runtime")


def sandbox_settings(**fields: Any) -> StackSettings:
    """``StackSettings(**fields)`` whose experiments host the sandbox daemon (``runtime_options`` merged over ours)."""
    runtime_options = {"preload": _PRELOAD, "memory_limit_mb": SANDBOX_MEMORY_MB, **fields.pop("runtime_options", {})}
    return StackSettings(
        agent_name=SANDBOX_AGENT_NAME,
        agent_command=(sys.executable, "-m", "agent_app.sandbox"),
        kind=ExperimentKind.SANDBOX,
        runtime_options=runtime_options,
        **fields,
    )
