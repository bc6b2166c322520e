"""The local stack: the whole pipeline on one machine, no AWS account.

- ``stack``: :class:`LocalStack` (a context manager), :class:`StackSettings`, :func:`start`, :func:`stop`.
- ``moto_server``: the moto server process and :func:`aws_env` (endpoints, dummy credentials, region).
- ``provision``: :func:`provision_shared` and :func:`provision_experiment`, from ``rollout_contract.resources``.
- ``worker``: the local Lambda worker (``python -m local_stack.worker --exp NAME``).
- ``model_endpoint``: the offline stand-in for vLLM (``python -m local_stack.model_endpoint``).
- ``problems``: the word problems the stand-in model solves, and their seeded generator.
- ``hosting``: what the caller gives the stack to host: :class:`LocalAgent`, :class:`DemoTask`.
- ``gateway``: rllm-model-gateway as a process, and :func:`session_base_url`.
- ``acr_emulator``: the AgentCore Runtime emulator (``python -m local_stack.acr_emulator serve``).
- ``cli``: ``rollouts local up|down|status`` and ``rollouts demo``.

Names load lazily, so ``import local_stack`` (and mounting the CLI commands) imports nothing heavy.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "DemoTask",
    "LocalAgent",
    "LocalStack",
    "StackSettings",
    "aws_env",
    "provision_experiment",
    "provision_shared",
    "session_base_url",
    "start",
    "stop",
]

_HOMES = {
    "DemoTask": "local_stack.hosting",
    "LocalAgent": "local_stack.hosting",
    "LocalStack": "local_stack.stack",
    "StackSettings": "local_stack.stack",
    "start": "local_stack.stack",
    "stop": "local_stack.stack",
    "aws_env": "local_stack.moto_server",
    "provision_experiment": "local_stack.provision",
    "provision_shared": "local_stack.provision",
    "session_base_url": "local_stack.gateway",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'local_stack' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)
