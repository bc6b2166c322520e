"""The example agents' images, short of Docker: their build context installs, and their command's code imports.

There is no Docker engine here, so each Dockerfile is read instead: the files it copies from the repository are
copied into a fresh folder, its ``pip install`` runs there into a fresh venv (with uv), and the module its
``CMD`` starts is imported with the image's ``ENV`` and working directory. A Dockerfile that forgets a file the
build needs (``setup.py``), or an image whose code cannot import what it uses, fails here.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.packaging, pytest.mark.processes]

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = sorted(ROOT.glob("examples/*/Dockerfile"))


def _instructions(dockerfile: Path) -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    lines = (line.strip() for line in text.splitlines())
    return [tuple(line.split(None, 1)) for line in lines if line and not line.startswith("#")]  # type: ignore[misc]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda path: path.parent.name)
def test_the_image_installs_from_its_build_context_and_its_command_imports(dockerfile: Path, tmp_path: Path) -> None:
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not installed (make install puts it in .venv)")
    # GIVEN the image's working directory with exactly the files its COPY lines take from the repository
    steps = _instructions(dockerfile)
    app = tmp_path / "app"
    app.mkdir()
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    (workdir,) = (argument for instruction, argument in steps if instruction == "WORKDIR")
    for instruction, argument in steps:
        if instruction == "COPY":
            *sources, destination = shlex.split(argument)
            for source in sources:
                target = app / destination / source if destination.endswith("/") else app / destination
                if (ROOT / source).is_dir():
                    shutil.copytree(ROOT / source, target, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy(ROOT / source, target)
        elif instruction == "ENV":
            # the image's working directory is this test's folder
            env.update(pair.replace(workdir, str(app)).split("=", 1) for pair in shlex.split(argument))
    # WHEN its pip install runs there, into a fresh venv
    (install,) = (argument for instruction, argument in steps if instruction == "RUN" and "pip install" in argument)
    requirement = shlex.split(install.split("pip install", 1)[1].split("&&")[0])[0]
    venv = tmp_path / "venv"
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True)
    python = str(venv / "bin" / "python")
    subprocess.run([uv, "pip", "install", "-q", "--python", python, requirement], cwd=app, check=True)
    # THEN the script its CMD runs imports in the image's environment (its `__main__` block not run)
    (command,) = (json.loads(argument) for instruction, argument in steps if instruction == "CMD")
    assert command[0] == "python"
    probe = f"import runpy; runpy.run_path({command[1]!r}, run_name='image_probe')"
    done = subprocess.run(
        [venv / "bin" / "python", "-c", probe], cwd=app, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # AND only the product's packages went into site-packages, none of the twin's or the examples' names
    site = next((venv / "lib").glob("python*/site-packages"))
    ours = {"rollout_contract", "agent_app", "trainer_client", "agentcore_rollouts_local", "examples", "local_stack"}
    assert {path.name for path in site.iterdir()} & ours == {"rollout_contract", "agent_app"}
