"""Stand-in of ``rllm.engine.remote_runtime``: the factory's plain if/else, without rLLM's real backends."""

from rllm.engine.remote_runtime.protocol import (
    RemoteAgentRuntime,
    RemoteRuntimeConfig,
    RemoteTaskResult,
    TaskSubmission,
)


def create_remote_runtime(config: RemoteRuntimeConfig, exp_id: str = "", model_id: str = "") -> RemoteAgentRuntime:
    if config.backend in ("agentcore", "harbor"):
        raise NotImplementedError(f"rLLM's {config.backend!r} runtime is not part of the stand-in")
    raise ValueError(f"Unknown remote runtime backend: {config.backend!r}")


__all__ = ["RemoteAgentRuntime", "RemoteRuntimeConfig", "RemoteTaskResult", "TaskSubmission", "create_remote_runtime"]
