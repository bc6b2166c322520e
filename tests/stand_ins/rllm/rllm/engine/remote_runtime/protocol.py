"""Stand-in of ``rllm.engine.remote_runtime.protocol``: the fields rLLM documents, same defaults."""

from dataclasses import dataclass, field
from typing import Any, Protocol

from rllm.workflows.workflow import TerminationReason


@dataclass
class RemoteRuntimeConfig:
    enabled: bool = False
    backend: str = "agentcore"
    agentcore: dict[str, Any] = field(default_factory=dict)
    harbor: dict[str, Any] = field(default_factory=dict)
    session_timeout: float = 900.0


@dataclass
class TaskSubmission:
    task: dict
    session_id: str
    task_id: str
    inference_url: str


@dataclass
class RemoteTaskResult:
    finished: bool
    session_id: str
    task_id: str = ""
    reward: float | None = None
    error: str | None = None
    termination_reason: TerminationReason | None = None
    elapsed: float = 0.0
    raw_result: dict[str, Any] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


class RemoteAgentRuntime(Protocol):
    def initialize(self) -> None: ...

    async def execute_tasks(
        self, submissions: list[TaskSubmission], timeout: float | None = None
    ) -> list[RemoteTaskResult]: ...

    def shutdown(self) -> None: ...


@dataclass
class AgentCoreRuntimeConfig:
    agent_runtime_arn: str = ""
    s3_bucket: str = ""
    tps_limit: int = 25


@dataclass
class HarborRuntimeConfig:
    agent: str = "mini-swe-agent"
    environment_type: str | None = None
    agent_kwargs: dict[str, Any] = field(default_factory=dict)
    agent_timeout_multiplier: float | None = None
    verifier_timeout_multiplier: float | None = None
    agent_setup_timeout_multiplier: float | None = None
    environment_build_timeout_multiplier: float | None = None
