"""The tiny policy's chat template as a renderer for the Tinker sampler (``trainer_client.backends.tinker``).

Name it in the Tinker adapter's config as ``renderer: local_stack.tiny_policy.tinker_renderer:TinyRenderer``: the
adapter's sampler renders each chat call with it, samples the ids through the Tinker API, and turns them back into
the message the served policy would answer (a ``<tool_call>`` token calls the offered tool with ``{}``).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from local_stack.tiny_policy.chat_template import ChatTokenizer
from local_stack.tiny_policy.server import called_tool

__all__ = ["TinyRenderer"]


class TinyRenderer:
    """:class:`ChatTokenizer`'s template; a turn ends at ``<|im_end|>``, or at ``<tool_call>`` if a tool is offered."""

    def __init__(self) -> None:
        self._tokenizer = ChatTokenizer()

    def prompt_ids(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]) -> list[int]:
        """The rendered messages and the generation prompt."""
        return self._tokenizer.render_prompt(messages, tools)

    def stop_ids(self, tools: Sequence[Mapping[str, Any]]) -> list[int]:
        """``<|im_end|>``, and ``<tool_call>`` when tools are offered."""
        return sorted(self._tokenizer.stop_ids) if tools else [self._tokenizer.im_end_id]

    def message(
        self, token_ids: Sequence[int], stopped: bool, request: Mapping[str, Any]
    ) -> tuple[dict[str, Any], str]:
        """The assistant message of the sampled ids and its ``finish_reason``."""
        body = list(token_ids[:-1] if stopped else token_ids)
        message: dict[str, Any] = {"role": "assistant", "content": self._tokenizer.decode(body)}
        if not (stopped and token_ids[-1] == self._tokenizer.tool_call_id):
            return message, "stop" if stopped else "length"
        name = called_tool(request.get("tools") or [], request.get("tool_choice", "auto")) or ""
        call = {
            "id": f"call_{uuid.uuid4().hex[:24]}",
            "type": "function",
            "function": {"name": name, "arguments": "{}"},
        }
        return {**message, "tool_calls": [call]}, "tool_calls"
