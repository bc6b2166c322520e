"""What the wheel installs: the library packages with their py.typed markers, not the CDK app or the tests."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.packaging

ROOT = Path(__file__).resolve().parents[2]
TYPED = ("rollout_contract", "agent_app", "trainer_client")


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not installed (make install puts it in .venv)")
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([uv, "build", "--wheel", "-q", "-o", str(out), str(ROOT)], check=True, timeout=600)
    (wheel,) = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


def test_library_packages_ship_with_py_typed(wheel_names: set[str]) -> None:
    assert {f"{package}/py.typed" for package in TYPED} <= wheel_names


def test_the_cdk_app_and_the_tests_stay_out_and_the_local_stack_has_its_handlers(wheel_names: set[str]) -> None:
    top_level = {name.split("/")[0] for name in wheel_names}
    assert not {"infra", "tests", "benchmarks"} & top_level
    assert {"lambdas/dispatcher.py", "local_stack/worker.py", "trainer_client/_cli.py"} <= wheel_names
