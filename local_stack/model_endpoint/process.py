"""The stand-in model as a child process of the local stack."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from local_stack._process import LOCALHOST, ManagedProcess, http_ready
from local_stack.model_endpoint.app import EndpointSettings

__all__ = ["model_endpoint_process"]


def model_endpoint_process(
    *, run_dir: Path, base_env: Mapping[str, str], settings: EndpointSettings | None = None
) -> ManagedProcess:
    """Describe the stand-in model on 127.0.0.1; the OS picks its port and ``url`` is known once it is ready."""
    settings = settings or EndpointSettings()
    port_file = run_dir / "model.port"
    port_file.parent.mkdir(parents=True, exist_ok=True)
    port_file.unlink(missing_ok=True)
    process = ManagedProcess(
        name="model",
        argv=[
            sys.executable,
            "-m",
            "local_stack.model_endpoint",
            "--host",
            LOCALHOST,
            "--port",
            "0",
            "--port-file",
            str(port_file),
            "--model-name",
            settings.model_name,
            "--seed",
            str(settings.seed),
            "--latency",
            str(settings.latency_s),
            "--policy",
            settings.policy,
            *(["--script", str(settings.script)] if settings.script is not None else []),
            *(["--moe"] if settings.moe else []),
            *(["--tinker"] if settings.tinker else []),
        ],
        log_path=run_dir / "model.log",
        env=dict(base_env),
    )

    def ready() -> bool:
        if process.url is None:
            try:
                port = int(port_file.read_text())
            except (OSError, ValueError):
                return False
            process.url = f"http://{LOCALHOST}:{port}"
        return http_ready(f"{process.url}/health")()

    process.ready = ready
    return process
