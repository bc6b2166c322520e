"""``install()`` reaches rLLM's factory inside Ray workers, where rLLM's verl launcher builds its trainer.

rLLM is not on PyPI: its types come from tests/stand_ins/rllm (see the README there). Ray is real.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

STAND_INS = Path(__file__).parents[1] / "stand_ins" / "rllm"
REPO = Path(__file__).parents[2]


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch):
    """rLLM's stand-in importable here and in workers; ``install()`` as a user calls it, undone afterwards."""
    monkeypatch.syspath_prepend(str(STAND_INS))
    import rllm.engine.remote_runtime as remote_runtime

    from trainer_client.backends import rllm as backend_rllm

    monkeypatch.setattr(remote_runtime, "create_remote_runtime", remote_runtime.create_remote_runtime)
    for name in ("RAY_RUNTIME_ENV_HOOK", backend_rllm._PREVIOUS_RUNTIME_ENV_HOOK):
        monkeypatch.delenv(name, raising=False)
    backend_rllm.install()
    return backend_rllm


def test_install_before_ray_init_puts_the_backend_in_every_ray_worker(installed, caplog):
    # GIVEN install() called in the driver, then Ray started as rLLM's launcher starts it
    pythonpath = os.pathsep.join([str(STAND_INS), str(REPO), *sys.path])
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
    assert name == "trainer_client.backends.rllm.AgentCoreEventsRuntime"
    assert pid != os.getpid()
