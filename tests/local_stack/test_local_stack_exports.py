"""The public names of ``local_stack`` and ``local_stack.model_endpoint`` resolve, and nothing else is exported."""

from __future__ import annotations

import subprocess
import sys

import pytest

import local_stack
import local_stack.model_endpoint as model_endpoint


def test_every_exported_name_resolves() -> None:
    # GIVEN the packages' __all__
    # WHEN each name is looked up THEN it exists
    for package in (local_stack, model_endpoint):
        assert all(getattr(package, name) is not None for name in package.__all__)
    assert sorted(local_stack.__all__) == local_stack.__all__


@pytest.mark.processes
def test_importing_the_cli_commands_loads_nothing_heavy() -> None:
    # GIVEN a fresh interpreter
    heavy = ("boto3", "starlette", "uvicorn", "httpx")
    code = f"import sys, local_stack.cli; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    # WHEN the rollouts CLI mounts the local commands
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    # THEN none of the stack's heavy dependencies was imported
    assert out.strip() == "[]"


@pytest.mark.processes
@pytest.mark.parametrize(
    ("module", "other"),
    [
        ("local_stack.model_endpoint.app", "local_stack.tiny_policy.server"),
        ("local_stack.tiny_policy.server", "local_stack.model_endpoint.app"),
    ],
)
def test_the_endpoint_and_the_tiny_policy_do_not_import_each_other(module: str, other: str) -> None:
    # GIVEN a fresh interpreter
    code = f"import sys, {module}; print({other!r} in sys.modules)"
    # WHEN one of the two modules is imported
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    # THEN the other was not (their shared types live in local_stack.model_endpoint.chat)
    assert out.strip() == "False", f"importing {module} imported {other}"
