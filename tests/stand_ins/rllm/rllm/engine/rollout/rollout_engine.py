"""Stand-in of ``rllm.engine.rollout.rollout_engine``: ``ModelOutput`` and the ``RolloutEngine`` base the engines
share (``is_validation`` picks the sampling parameters; ``get_model_response`` calls ``_get_model_response``)."""

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ModelOutput:
    text: str | None = None
    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[Any] | None = None
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    prompt_length: int = 0
    completion_length: int = 0
    finish_reason: str | None = None
    weight_version: int | None = None


class RolloutEngine:
    def __init__(self, *args, **kwargs):
        self.is_validation = False
        self.weight_version = 0

    async def get_model_response(self, messages, **kwargs):
        return await self._get_model_response(messages, **kwargs)

    async def _get_model_response(self, messages, **kwargs):
        raise NotImplementedError
