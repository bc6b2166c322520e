"""``install()`` reaches rLLM's factory inside Ray workers, where rLLM's verl launcher builds its trainer.

rLLM is not on PyPI: its types, its unified config's remote-runtime blocks and its ``UnifiedTrainer``'s
runtime selection come from tests/stand_ins/rllm, or from the real rLLM tree ``AGENTCORE_STAND_INS_RLLM`` names
(see the README there). Ray, Hydra and uv are real.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

sys.path.insert(0, str(Path(__file__).parents[1] / "stand_ins" / "rllm"))
from rllm_tree import rllm_paths  # noqa: E402

#: What imports rLLM: the stand-in, or a real tree first.
RLLM_PATHS = rllm_paths()
REPO = Path(__file__).parents[2]


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch):
    """rLLM's stand-in importable here and in workers; ``install()`` as a user calls it, undone afterwards."""
    for path in reversed(RLLM_PATHS):
        monkeypatch.syspath_prepend(path)
    import rllm.engine.remote_runtime as remote_runtime

    from trainer_client.backends import rllm as backend_rllm

    monkeypatch.setattr(remote_runtime, "create_remote_runtime", remote_runtime.create_remote_runtime)
    for name in ("RAY_RUNTIME_ENV_HOOK", backend_rllm._PREVIOUS_RUNTIME_ENV_HOOK):
        monkeypatch.delenv(name, raising=False)
    backend_rllm.install()
    return backend_rllm


def test_install_before_ray_init_puts_the_backend_in_every_ray_worker(installed, caplog):
    # GIVEN install() called in the driver, then Ray started as rLLM's launcher starts it
    pythonpath = os.pathsep.join([*RLLM_PATHS, str(REPO), *sys.path])
    ray.init(num_cpus=1, include_dashboard=False, runtime_env={"env_vars": {"PYTHONPATH": pythonpath}})
    try:

        @ray.remote
        def trainer_builds_its_runtime() -> tuple[str, int]:
            # what rLLM's trainer does in its Ray actor: a lazy import of the factory, then a call
            from rllm.engine.remote_runtime import RemoteRuntimeConfig, create_remote_runtime

            config = RemoteRuntimeConfig(enabled=True, backend="agentcore_events", agentcore={"experiment": "exp"})
            runtime = create_remote_runtime(config, exp_id="Trainer_Name", model_id="m")
            return f"{type(runtime).__module__}.{type(runtime).__qualname__}", os.getpid()

        # WHEN the trainer, in a worker process, builds its remote runtime
        name, pid = ray.get(trainer_builds_its_runtime.remote(), timeout=120)
        # (and install() called again now says that workers of this Ray instance do not get it that way)
        with caplog.at_level(logging.WARNING, logger="trainer_client.backends.rllm"):
            installed.install()
        assert "Ray is already initialized" in caplog.text and "setup_ray_worker" in caplog.text
    finally:
        ray.shutdown()
    # THEN it is ours (the stand-in factory alone raises "Unknown remote runtime backend")
    assert name == "trainer_client.backends._rllm_runtime.AgentCoreEventsRuntime"
    assert pid != os.getpid()


RLLM_COMMAND = REPO / "examples" / "math_agent" / "backends" / "rllm.sh"


def _unified_config(*overrides: str):
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="rllm.trainer.config", version_base=None):
        return compose(config_name="unified", overrides=list(overrides))


class _NoTrainingBackend:
    """A backend that trains nothing: what rLLM's UnifiedTrainer asks of one before it picks its remote runtime."""

    def __init__(self, config, **kwargs) -> None:
        self.config = config

    def validate_config(self) -> None:
        pass

    def init_rollout_engine(self, **kwargs) -> None:
        return None


def test_rllms_unified_trainer_builds_our_runtime_from_the_readme_command(installed):
    # GIVEN rLLM's unified config composed with exactly the README command's overrides
    from rllm.trainer.unified_trainer import UnifiedTrainer

    overrides = [arg for arg in shlex.split(RLLM_COMMAND.read_text()) if "=" in arg]
    # WHEN rLLM's UnifiedTrainer (on rLLM's verl launcher's backend name) picks its remote runtime
    trainer = UnifiedTrainer(_NoTrainingBackend, _unified_config(*overrides), backend_name="verl")
    # THEN it is ours, on the README's experiment, telling agents the README's model name (not 'default')
    assert isinstance(trainer._remote_runtime, installed.AgentCoreEventsRuntime)
    assert trainer._remote_runtime.experiment == "gsm8k-grpo-1"
    assert trainer._remote_runtime._model_id == "Qwen/Qwen2.5-1.5B-Instruct"
    # AND without the experiment key rLLM's default experiment_name is refused with the key to set
    without = [arg for arg in overrides if "agentcore.experiment" not in arg]
    with pytest.raises(ValueError, match=r"default 'default'.*\+rllm.remote_runtime.agentcore.experiment=NAME"):
        UnifiedTrainer(_NoTrainingBackend, _unified_config(*without), backend_name="verl")


def test_model_name_is_added_with_a_plus_as_rllms_verl_config_has_no_model_block(installed):
    # rLLM's unified config on its verl backend (verl's ppo_trainer) has no top-level `model`: Hydra refuses
    # `model.name=...` and takes `+model.name=...`
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException, match="model"):
        _unified_config("model.name=Qwen/Qwen2.5-1.5B-Instruct")
    assert _unified_config("+model.name=m").model.name == "m"


def _fresh_python(code: str, *, uv_run: bool = False) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter of this environment (under ``uv run`` if asked), rLLM's stand-in first."""
    command = [sys.executable, "-c", code]
    if uv_run:
        uv = Path(sys.executable).with_name("uv")
        command = [str(uv), "run", "--no-project", "--offline", "--python", sys.executable, "python", "-c", code]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*RLLM_PATHS, str(REPO)])}
    env.pop("RAY_RUNTIME_ENV_HOOK", None)
    env.pop("RAY_ENABLE_UV_RUN_RUNTIME_ENV", None)
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120, check=False)


def test_a_ray_workers_setup_hook_imports_neither_rllm_nor_ray_and_wraps_rllms_factory_when_rllm_loads():
    done = _fresh_python(
        "import sys\n"
        "from trainer_client.backends import rllm as ours\n"
        "ours.setup_ray_worker()\n"
        "print(sorted(m for m in ('rllm', 'ray', 'torch', 'transformers', 'verl') if m in sys.modules))\n"
        "from rllm.engine.remote_runtime import RemoteRuntimeConfig, create_remote_runtime\n"
        "config = RemoteRuntimeConfig(backend='agentcore_events', agentcore={'experiment': 'exp'})\n"
        "print(type(create_remote_runtime(config, exp_id='x')).__name__)\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["[]", "AgentCoreEventsRuntime"]


@pytest.mark.skipif(not Path(sys.executable).with_name("uv").exists(), reason="no uv in this environment")
def test_under_uv_run_install_makes_ray_call_our_hook_and_still_applies_rays_uv_hook(caplog):
    # GIVEN a trainer script started with `uv run`, where Ray replaces RAY_RUNTIME_ENV_HOOK with its uv hook
    done = _fresh_python(
        "import json\n"
        "from trainer_client.backends.rllm import install\n"
        "install()\n"
        "from ray._private.worker import _maybe_modify_runtime_env\n"
        "env = _maybe_modify_runtime_env({'env_vars': {'A': '1'}}, False)\n"  # what ray.init does with it
        "print(json.dumps(env))\n",
        uv_run=True,
    )
    # THEN install() said so, and the runtime env Ray uses has our worker hook and uv's interpreter
    assert done.returncode == 0, done.stderr
    assert "running under `uv run`" in done.stderr
    env = json.loads(done.stdout.splitlines()[-1])
    assert env["worker_process_setup_hook"] == "trainer_client.backends.rllm.setup_ray_worker"
    assert env["py_executable"].startswith(str(Path(sys.executable).with_name("uv")) + " run")
    assert env["env_vars"] == {"A": "1"}
    # AND once Ray is imported it is too late: install() raises with the way that works
    late = _fresh_python("import ray\nfrom trainer_client.backends.rllm import install\ninstall()\n", uv_run=True)
    assert late.returncode != 0 and "RAY_ENABLE_UV_RUN_RUNTIME_ENV=0" in late.stderr
