"""The functions' package runs on what AWS provides: no SDK of its own from the runtime, Powertools from the layer.

The handlers are imported in a fresh interpreter (``-I -S``: no site-packages, no environment) whose path
holds only what Lambda puts there: the function package as synthesized (``/var/task``) and the Powertools
layer's contents (``/opt/python``: Powertools and pydantic, no boto3, which the layer strips).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from infra.functions import RUNTIME, bundled_distributions, copy_distribution, powertools_version
from rollout_contract.resources import HandlerSettings
from tests.infra.conftest import SYNTH_TIMEOUT_S, Synthesized

#: The first test also pays for the session's synth of two apps (minutes on a busy machine).
pytestmark = [pytest.mark.cdk, pytest.mark.timeout(SYNTH_TIMEOUT_S)]

#: What the public Powertools layer holds (v3: Powertools with its extras' pure dependencies and pydantic v2).
LAYER_DISTRIBUTIONS = (
    "aws-lambda-powertools",
    "jmespath",
    "typing-extensions",
    "pydantic",
    "pydantic-core",
    "annotated-types",
    "typing-inspection",
)
HANDLERS = ("lambdas.dispatcher", "lambdas.finisher", "lambdas.sweeper")
#: Runs in the fresh interpreter: argv = task dir, layer dir, handler modules. Prints what it found as JSON.
PROBE = """
import importlib, json, sys
task, layer, *handlers = sys.argv[1:]
sys.path[:0] = [task, layer]
for name in handlers:
    importlib.import_module(name)
import boto3, botocore
from lambdas.runtime import current_runtime
current_runtime()  # the cold start: settings from ROLLOUTS_*, clients built, versions logged
client = boto3.client("bedrock-agentcore")
print(json.dumps({
    "botocore": botocore.__version__,
    "boto3_file": boto3.__file__,
    "botocore_file": botocore.__file__,
    "operations": [op for op in ("invoke_agent_runtime", "stop_runtime_session") if hasattr(client, op)],
}))
"""


@pytest.fixture(scope="module")
def layer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stand-in for the Powertools layer's ``python/`` folder: the layer's distributions, no boto3."""
    target = tmp_path_factory.mktemp("layer")
    for name in LAYER_DISTRIBUTIONS:
        copy_distribution(name, importlib.metadata.version(name), target, allow_compiled=True)
    return target


def _function_package(synth: Synthesized) -> Path:
    """The directory the dispatcher's code asset was synthesized to (what `cdk deploy` uploads)."""
    resources = synth.experiments["alpha"].to_json()["Resources"]
    (function,) = [
        r
        for r in resources.values()
        if r["Type"] == "AWS::Lambda::Function" and r["Properties"]["Handler"] == ("lambdas.dispatcher.handler")
    ]
    asset_hash = function["Properties"]["Code"]["S3Key"].removesuffix(".zip")
    return synth.outdir / f"asset.{asset_hash}"


def test_handlers_import_and_cold_start_on_the_package_and_the_layer_alone(synth: Synthesized, layer: Path) -> None:
    # GIVEN the synthesized function package and a layer stand-in without boto3 (as AWS's layer)
    package = _function_package(synth)
    assert not (layer / "boto3").exists() and not (layer / "botocore").exists()
    environment = {
        "AWS_DEFAULT_REGION": "us-west-2",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        **HandlerSettings(
            exp_id="alpha",
            results_bucket="bucket",
            sessions_table="sessions",
            budget_table="budgets",
            runtime_arn="arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/rollout_alpha-AbCdE12345",
            dispatch_queue_url="https://sqs.us-west-2.amazonaws.com/123456789012/dispatch",
        ).to_env(),
    }
    # WHEN a fresh interpreter with nothing else on its path imports every handler and cold-starts
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-c", PROBE, str(package), str(layer), *HANDLERS],
        env={"PATH": os.environ.get("PATH", ""), **environment},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    *logs, last = result.stdout.strip().splitlines()
    found = json.loads(last)
    # THEN the SDK comes from the package, at the pinned version, with both AgentCore operations the code calls
    assert Path(found["boto3_file"]).is_relative_to(package)
    assert Path(found["botocore_file"]).is_relative_to(package)
    assert found["botocore"] == bundled_distributions()["botocore"]
    assert found["operations"] == ["invoke_agent_runtime", "stop_runtime_session"]
    # AND the cold start logs the SDK version
    cold_start = [json.loads(line) for line in logs if '"cold start"' in line]
    assert cold_start and cold_start[0]["botocore_version"] == found["botocore"]


def test_the_shipped_sdk_is_pure_python_for_the_functions_runtime_and_new_enough() -> None:
    # GIVEN the distributions the package ships, at their pins (what the suite has installed)
    runtime_python = RUNTIME.name.removeprefix("python")
    for name, version in bundled_distributions().items():
        metadata = importlib.metadata.metadata(name)
        # THEN each is installed at its pin and declares support for the functions' Python
        assert importlib.metadata.version(name) == version
        assert runtime_python in SpecifierSet(metadata.get("Requires-Python") or ""), name
        # AND is pure Python (no compiled file: it runs on ARM64 whatever machine built the package)
        files = importlib.metadata.distribution(name).files or []
        assert not [f for f in files if f.suffix in (".so", ".pyd")], name
    # AND botocore has StopRuntimeSession (1.40.50 or later)
    major, minor, patch = (int(part) for part in bundled_distributions()["botocore"].split(".")[:3])
    assert (major, minor, patch) >= (1, 40, 50)
    # AND the Powertools layer release is the one the suite runs
    assert importlib.metadata.version("aws-lambda-powertools") == powertools_version()
