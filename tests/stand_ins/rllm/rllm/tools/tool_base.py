"""Stand-in of ``rllm.tools.tool_base``: ``ToolCall`` (a name and its parsed arguments)."""

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
