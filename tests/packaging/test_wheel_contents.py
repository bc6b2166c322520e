"""What a user installs: the wheel and sdist as `python -m build` makes them, checked by twine, installed in fresh
virtual environments away from the checkout (decision D80).

The product's packages sit at the top of site-packages under their own names; the local twin's (``local_stack``,
``lambdas``, ``examples``) only inside ``agentcore_rollouts_local``; a trainer-only install has no twin command
that could crash, and names the extra for the ones it mounts; the README's quick start runs from the wheel.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = pytest.mark.packaging

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("rollout_contract", "rollout_budgets", "agent_app", "trainer_client")
TWIN = "agentcore_rollouts_local"


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    build = [sys.executable, "-m", "build", "--installer", "uv", "-o", str(out), str(ROOT)]
    subprocess.run(build, check=True, capture_output=True, timeout=600, env={**os.environ, "PATH": _path()})
    subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *map(str, out.iterdir())], check=True)
    return out


def _path() -> str:
    # `build --installer uv` finds uv on PATH; the venv's bin holds it even when the venv is not activated.
    return os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])


def _wheel(dist: Path) -> Path:
    (wheel,) = dist.glob("*.whl")
    return wheel


def test_the_wheel_ships_the_product_at_the_top_and_the_twin_under_its_own_name(dist: Path) -> None:
    # GIVEN the wheel `python -m build` made (twine checked it and the sdist)
    with zipfile.ZipFile(_wheel(dist)) as archive:
        names = set(archive.namelist())
    # THEN its top-level names are the product's packages, the twin's home and the metadata, nothing generic
    top_level = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top_level == {*PRODUCT, TWIN}
    assert {f"{package}/py.typed" for package in PRODUCT} <= names
    # AND the twin carries its handlers and the example agents with their data files
    assert {
        f"{TWIN}/lambdas/dispatcher.py",
        f"{TWIN}/local_stack/worker.py",
        f"{TWIN}/examples/math_agent/rl_app.py",
        f"{TWIN}/examples/math_agent/Dockerfile",
    } <= names
    # AND beside it the sdist it was built from (`build` makes the wheel from the sdist, not from the checkout)
    assert [path.name for path in dist.glob("*.tar.gz")] == [_wheel(dist).name.split("-py3")[0] + ".tar.gz"]


@pytest.mark.processes
def test_a_trainer_only_install_names_the_extra_for_the_twins_commands(
    dist: Path, tmp_path: Path, fresh_venv: Callable[..., Path]
) -> None:
    # GIVEN the trainer extra alone, installed from the wheel in a fresh venv
    venv = fresh_venv(f"{_wheel(dist)}[trainer]")
    rollouts = venv / "bin" / "rollouts"
    # THEN no command of another extra is installed
    assert not (venv / "bin" / "acr-emulator").exists()
    # AND `rollouts local up`, run away from the checkout, says what to install instead of a traceback
    done = subprocess.run([rollouts, "local", "up"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "pip install 'agentcore-rollouts[local]'" in done.stderr
    assert "Traceback" not in done.stderr
    # AND the generic names stay out of the user's imports
    probe = "import importlib.util as u; print([n for n in ('examples', 'lambdas', 'local_stack') if u.find_spec(n)])"
    out = subprocess.run([venv / "bin" / "python", "-c", probe], cwd=tmp_path, capture_output=True, text=True)
    assert out.stdout.strip() == "[]"
    # AND the version is the distribution's
    version = subprocess.run([rollouts, "--version"], capture_output=True, text=True, check=True).stdout
    assert version.strip() == f"rollouts {_wheel(dist).name.split('-')[1]}"


@pytest.mark.e2e
def test_the_quick_start_runs_from_the_wheel(dist: Path, tmp_path: Path, fresh_venv: Callable[..., Path]) -> None:
    # GIVEN the local and examples extras, installed from the wheel in a fresh venv
    venv = fresh_venv(f"{_wheel(dist)}[local,examples]")
    work = tmp_path / "work"
    work.mkdir()
    # WHEN the README's demo runs, from a directory that is not the checkout
    done = subprocess.run(
        [venv / "bin" / "rollouts", "demo", "--prompts", "2", "--samples", "2"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    # THEN every rollout succeeded, through the installed twin
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rollouts        4 (succeeded 4)" in done.stdout
    assert (work / ".local-stack").is_dir()
