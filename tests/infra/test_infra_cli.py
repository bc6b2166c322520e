"""The CDK CLI runs the app offline: ``npx cdk synth -c experiment=demo`` as ops would type it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rollout_contract.resources import SHARED_STACK_NAME, ExperimentResources

PROJECT_ROOT = Path(__file__).resolve().parents[2]
#: Generous: a synth takes ~40 s on an idle machine and several minutes on a busy one.
CLI_TIMEOUT_S = 600
pytestmark = [pytest.mark.cdk, pytest.mark.timeout(CLI_TIMEOUT_S + 60)]


def cdk(*args: str, outdir: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the project's CDK CLI offline (``env`` adds variables, e.g. the account and region)."""
    if not (PROJECT_ROOT / "node_modules" / ".bin" / "cdk").exists():
        pytest.fail("the CDK CLI is not installed: run `npm ci` (or `make install`) in the project root")
    if shutil.which("npx") is None:
        pytest.fail("npx is not on PATH: install Node 20 or later")
    environment = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONDONTWRITEBYTECODE", "CDK_DEFAULT_ACCOUNT", "CDK_DEFAULT_REGION")
    }
    environment.update(
        JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION="20",
        CDK_DISABLE_VERSION_CHECK="true",
        CDK_DISABLE_CLI_TELEMETRY="true",
        **(env or {}),
    )
    return subprocess.run(
        ["npx", "--no-install", "cdk", *args, "--output", str(outdir), "--no-notices", "--no-version-reporting"],
        cwd=PROJECT_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )


def test_cdk_synth_of_the_demo_experiment_succeeds_offline(tmp_path: Path) -> None:
    # GIVEN the project's cdk.json and no AWS account
    # WHEN ops run `npx cdk synth -c experiment=demo -c image_tag=v1`
    result = cdk("synth", "-c", "experiment=demo", "-c", "image_tag=v1", "--quiet", outdir=tmp_path)
    # THEN it succeeds and writes the demo stack alone: an experiment deploy touches nothing else
    assert result.returncode == 0, result.stderr[-3000:]
    stack_name = ExperimentResources.for_experiment("demo").stack_name
    assert (tmp_path / f"{stack_name}.template.json").is_file()
    assert not (tmp_path / f"{SHARED_STACK_NAME}.template.json").exists()


def test_cdk_synth_without_an_experiment_holds_the_shared_stack_alone(tmp_path: Path) -> None:
    # GIVEN no -c experiment (the once-per-account deploy of the shared resources)
    # WHEN synth runs
    result = cdk("synth", "--quiet", outdir=tmp_path)
    # THEN it writes the shared stack and no experiment stack
    assert result.returncode == 0, result.stderr[-3000:]
    templates = sorted(path.name for path in tmp_path.glob("*.template.json"))
    assert templates == [f"{SHARED_STACK_NAME}.template.json"]


def test_cdk_synth_with_a_bad_experiment_name_says_what_is_wrong(tmp_path: Path) -> None:
    # GIVEN an experiment name that cannot name AWS resources
    # WHEN synth runs
    result = cdk("synth", "-c", "experiment=Bad_Name", "--quiet", outdir=tmp_path)
    # THEN it fails and names the flag and the rule
    assert result.returncode != 0
    assert "-c experiment" in result.stderr
    assert "lowercase letters" in result.stderr


def test_cdk_synth_without_an_image_says_which_flag_to_add(tmp_path: Path) -> None:
    # GIVEN an experiment deploy that names no image (the agent repository starts empty)
    # WHEN synth runs
    result = cdk("synth", "-c", "experiment=demo", "--quiet", outdir=tmp_path)
    # THEN it fails before building anything, naming the flag
    assert result.returncode != 0
    assert "missing -c image_tag=TAG" in result.stderr
