"""Stand-in of ``rllm.types``: the fields of ``Step``, ``Trajectory``, ``Episode`` and ``TrajectoryGroup`` the Tinker
path reads (rLLM's are pydantic models with more of them)."""

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Step:
    prompt_ids: list = field(default_factory=list)
    response_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    advantage: float | list[float] | None = None
    weight_version: int | None = None


@dataclass
class Trajectory:
    name: str = "default"
    task: Any = None
    steps: list[Step] = field(default_factory=list)
    reward: float | None = None


@dataclass
class Episode:
    id: str = ""
    task: Any = None
    is_correct: bool = False
    session_id: str | None = None
    trajectories: list[Trajectory] = field(default_factory=list)
    metrics: dict = field(default_factory=dict)
    metadata: dict = field(default_factory=dict)
    termination_reason: Any = None


@dataclass
class TrajectoryGroup:
    trajectories: list[Trajectory]
    group_id: str = ""
    group_role: str = "default"
