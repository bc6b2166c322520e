"""The contract package's surface: a sorted ``__all__`` whose names all resolve, and no I/O dependencies."""

from __future__ import annotations

import subprocess
import sys

import pytest

import rollout_contract


def test_all_is_sorted_and_every_name_resolves() -> None:
    # GIVEN / WHEN / THEN the package's table of contents is sorted and complete
    assert rollout_contract.__all__ == sorted(rollout_contract.__all__)
    assert all(getattr(rollout_contract, name) is not None for name in rollout_contract.__all__)


@pytest.mark.processes
def test_importing_the_contract_loads_no_aws_sdk_or_web_framework() -> None:
    # GIVEN a fresh interpreter (the agent image, the Lambdas and the trainer all import the contract)
    heavy = ("boto3", "botocore", "aws_cdk", "starlette", "httpx", "aws_lambda_powertools")
    code = (
        "import sys, importlib, pkgutil, rollout_contract\n"
        "for m in pkgutil.iter_modules(rollout_contract.__path__):\n"
        "    importlib.import_module(f'rollout_contract.{m.name}')\n"
        f"print(sorted(m for m in {heavy!r} if m in sys.modules))"
    )
    # WHEN every contract module is imported
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    # THEN none of them pulled in an SDK or a framework: the contract stays pure
    assert out.strip() == "[]"
