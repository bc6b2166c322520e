"""Sandboxes on ACR for the trainer's own agent loop: ART 0.2.0's ``agentcore_rl_toolkit.sandbox``, in our budgets.

``from trainer_client.sandbox import SandboxClient`` replaces ``from agentcore_rl_toolkit.sandbox import
SandboxClient``. A sandbox experiment's runtime serves ART's sandbox protocol (``agent_app.sandbox``); each
sandbox holds a slot of the shared session budget, each call spends a token of the shared invoke budget, and the
sweeper stops every sandbox at its deadline.

- :class:`SandboxClient`: ``start()`` a sandbox, ``attach()`` to a live one; ``for_experiment(name)``.
- :class:`Sandbox`: ``exec(argv, ...)``, ``get_exec(id)``, ``terminate()``; a context manager.
- :class:`ExecHandle`: ``status()``, ``result(timeout)``.
- :class:`ExecResult`; errors :class:`SandboxError`, :class:`ExecError`, :class:`ExecTimeoutError`,
  :class:`SandboxProtocolError`, :class:`SandboxEndedError`, :class:`SandboxCapacityError`.
"""

from trainer_client.sandbox._client import ExecHandle, Sandbox, SandboxClient
from trainer_client.sandbox._types import (
    ExecError,
    ExecResult,
    ExecTimeoutError,
    SandboxCapacityError,
    SandboxEndedError,
    SandboxError,
    SandboxProtocolError,
)

__all__ = [
    "ExecError",
    "ExecHandle",
    "ExecResult",
    "ExecTimeoutError",
    "Sandbox",
    "SandboxCapacityError",
    "SandboxClient",
    "SandboxEndedError",
    "SandboxError",
    "SandboxProtocolError",
]
