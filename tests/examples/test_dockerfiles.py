"""Each example's Dockerfile, and the sandbox image's, makes an image ACR can run: ARM64, port 8080, not root (or
root only to start model-written code as the sandbox user, strictly confined), and what its CMD imports inside.

No Docker here: the file is read, and the modules its CMD runs are followed import by import: a module of this
repository must be in a COPY'd folder, any other must be installed by the extras its ``pip install`` names
(checked against the installed distributions' metadata), or be in the standard library. Then, short of a build,
its steps are replayed: the files it copies go into a fresh folder, its ``pip install`` runs there into a fresh
venv, and its command's script is imported with the image's ``ENV`` and working directory; in an image that
confines model-written code, a confined program started with the installed ``agent_app`` runs as the sandbox user.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from agent_app.confinement import ISOLATION_ENV, SANDBOX_GID, SANDBOX_UID, Isolation

ROOT = Path(__file__).parents[2]
DOCKERFILES = [*sorted((ROOT / "examples").glob("*/Dockerfile")), ROOT / "agent_app" / "sandbox" / "Dockerfile"]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _instructions(path: Path) -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` in order, continuation lines joined, comments dropped."""
    lines = [line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n\s*", " ", "\n".join(lines))
    return [
        (word.upper(), rest.strip())
        for word, _, rest in (line.strip().partition(" ") for line in joined.splitlines())
        if word
    ]


def _installed(extras: list[str]) -> set[str]:
    """The distributions ``pip install ".[extras]"`` of this project installs, by canonical name."""
    names: set[str] = set()
    pending = [Requirement(text) for text in PROJECT["dependencies"]]
    for extra in extras:
        pending += [Requirement(text) for text in PROJECT["optional-dependencies"][extra]]
    while pending:
        requirement = pending.pop()
        name = canonicalize_name(requirement.name)
        if name == canonicalize_name(PROJECT["name"]):
            pending += [Requirement(t) for extra in requirement.extras for t in PROJECT["optional-dependencies"][extra]]
            continue
        if name in names:
            continue
        names.add(name)
        for text in importlib.metadata.requires(requirement.name) or []:
            needed = Requirement(text)
            wanted = [""] + sorted(requirement.extras)
            if needed.marker is None or any(needed.marker.evaluate({"extra": extra}) for extra in wanted):
                pending.append(needed)
    return names


def _module_file(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _main_file(module: str) -> Path:
    """What ``python -m module`` runs: the package's ``__main__.py``, or the module's file."""
    package_main = ROOT.joinpath(*module.split("."), "__main__.py")
    return package_main if package_main.is_file() else ROOT.joinpath(*module.split(".")).with_suffix(".py")


def _imports(path: Path, module: str) -> set[str]:
    """Absolute names of the modules ``path`` imports, outside ``if TYPE_CHECKING:`` blocks."""
    tree = ast.parse(path.read_text())
    typing_only = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for statement in block.body
        for node in ast.walk(statement)
    }
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]) if node.level else ""
            name = ".".join(part for part in (base, node.module or "") if part)
            found.add(name)
            found.update(f"{name}.{alias.name}" for alias in node.names)  # a submodule, when it is one
    return found


def _reached(script: Path) -> tuple[set[str], set[str]]:
    """Top-level names of the first-party packages and of the other modules running ``script`` imports."""
    first_party: set[str] = set()
    others: set[str] = set()
    pending = [(script, ".".join(script.relative_to(ROOT).with_suffix("").parts))]
    seen: set[Path] = set()
    while pending:
        path, module = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in _imports(path, module):
            top = name.partition(".")[0]
            if top == "__future__" or top in sys.stdlib_module_names:
                continue
            parts = name.split(".")
            files = [_module_file(".".join(parts[:i])) for i in range(1, len(parts) + 1)]
            if files[0] is None and not (ROOT / top).is_dir():
                others.add(top)
                continue
            first_party.add(top)
            pending += [(file, ".".join(parts[:i])) for i, file in enumerate(files, 1) if file is not None]
    return first_party, others


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=[path.parent.name for path in DOCKERFILES])
def test_the_example_image_runs_on_acr_and_holds_what_its_command_imports(dockerfile: Path) -> None:
    steps = _instructions(dockerfile)
    arguments = {word: [rest for w, rest in steps if w == word] for word, _ in steps}
    # ARM64 (ACR runs arm64 images), port 8080, not root
    assert all("--platform=linux/arm64" in line for line in arguments["FROM"])
    assert arguments["EXPOSE"] == ["8080"] and any("PORT=8080" in line for line in arguments["ENV"])
    assert arguments["USER"]
    if arguments["USER"][-1] in ("root", "0"):
        # root only to start model-written code as the sandbox user (D101): strict isolation, the user created
        assert any(f"{ISOLATION_ENV}={Isolation.STRICT.value}" in line for line in arguments["ENV"])
        (install,) = [line for line in arguments["RUN"] if "useradd" in line]
        assert f"groupadd --system --gid {SANDBOX_GID} " in install
        assert f"useradd --system --uid {SANDBOX_UID} --gid {SANDBOX_GID} " in install
        assert "chmod -R go-rwx " in install  # the image's own files: none readable by that user
    # the command runs a file of the repository that the image copies (``python FILE`` or ``python -m MODULE``)
    command = json.loads(arguments["CMD"][-1])
    assert command[0] == "python"
    script = ROOT / command[1] if command[1] != "-m" else _main_file(command[2])
    assert script.is_file()
    runs = script.relative_to(ROOT).as_posix()
    copied = {rest.split()[0].rstrip("/") for rest in arguments["COPY"]}
    assert all((ROOT / source).exists() for source in copied if source != "pyproject.toml")
    # what it imports: this repository's packages are copied, everything else is installed by the named extras
    (install,) = [line for line in arguments["RUN"] if "pip install" in line]
    extras = re.search(r'"\.\[([a-z,]+)\]"', install)
    assert extras is not None, install
    first_party, others = _reached(script)
    assert runs.split("/")[0] in copied and first_party <= copied, first_party - copied
    installed = _installed(extras.group(1).split(","))
    providers = importlib.metadata.packages_distributions()
    missing = {name for name in others if not {canonicalize_name(d) for d in providers.get(name, [])} & installed}
    assert not missing, f"{dockerfile.relative_to(ROOT)} runs code importing {sorted(missing)}, not installed"


@pytest.mark.processes
@pytest.mark.packaging
@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=[path.parent.name for path in DOCKERFILES])
def test_the_image_installs_from_its_build_context_and_its_command_imports(
    dockerfile: Path, tmp_path: Path, fresh_venv: Callable[..., Path]
) -> None:
    # GIVEN the image's working directory (a fresh folder) with exactly the files its COPY lines take
    steps = _instructions(dockerfile)
    app = tmp_path / "app"
    app.mkdir()
    workdir = next(rest for word, rest in steps if word == "WORKDIR")  # where the COPY lines put their files
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    for word, rest in steps:
        if word == "COPY":
            *sources, destination = shlex.split(rest)
            for source in sources:
                target = app / destination / source if destination.endswith("/") else app / destination
                if (ROOT / source).is_dir():
                    shutil.copytree(ROOT / source, target, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    shutil.copy(ROOT / source, target)
        elif word == "ENV":
            env.update(pair.replace(workdir, str(app)).split("=", 1) for pair in shlex.split(rest))
    # WHEN its pip install runs there, into a fresh venv
    (install,) = (rest for word, rest in steps if word == "RUN" and "pip install" in rest)
    requirement = shlex.split(install.split("pip install", 1)[1].split("&&")[0])[0]
    venv = fresh_venv(requirement, cwd=app)
    python = venv / "bin" / "python"
    # THEN the script or module its CMD runs imports in the image's environment (its `__main__` block not run)
    command = json.loads(next(rest for word, rest in reversed(steps) if word == "CMD"))
    run = f"run_module({command[2]!r}" if command[1] == "-m" else f"run_path({command[1]!r}"
    probe = f"import runpy; runpy.{run}, run_name='image_probe')"
    done = subprocess.run([python, "-c", probe], cwd=app, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    # AND only the product's packages went into site-packages, none of the twin's or the examples' names
    site = next(venv.glob("lib/python*/site-packages"))
    ours = {"rollout_contract", "agent_app", "trainer_client", "agentcore_rollouts_local", "examples", "local_stack"}
    assert {path.name for path in site.iterdir()} & ours == {"rollout_contract", "agent_app"}
    # AND in an image that confines model-written code, the installed agent_app starts it as the sandbox user
    if env.get(ISOLATION_ENV) == Isolation.STRICT.value and os.geteuid() == 0:
        probe = (
            "import subprocess; from agent_app.confinement import Confinement, clean_environment; "
            "argv = Confinement(cpu_s=10).command(['id', '-u'], scratch='/tmp'); "
            "print(subprocess.run(argv, env=clean_environment(), capture_output=True, text=True).stdout)"
        )
        done = subprocess.run([python, "-c", probe], cwd=app, env=env, capture_output=True, text=True, timeout=120)
        assert done.stdout.strip() == str(SANDBOX_UID), done.stderr[-3000:]
