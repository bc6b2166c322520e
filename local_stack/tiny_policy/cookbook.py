"""The tiny policy for frameworks that sample through tinker-cookbook: a Hugging Face tokenizer and a renderer.

rLLM's Tinker backend loads its tokenizer with ``AutoTokenizer.from_pretrained(model.name)`` and renders chats with
the tinker-cookbook renderer ``rollout_engine.renderer_name`` names. For the tiny policy:

- :func:`save_tokenizer` writes a ``PreTrainedTokenizerFast`` directory whose ids are
  :class:`~local_stack.tiny_policy.chat_template.ChatTokenizer`'s (one per character, the four special tokens first);
  its path is the model's name (the local Tinker endpoint serves the tiny policy under it).
- :func:`register` adds :class:`TinyPolicyRenderer` to tinker-cookbook's renderers as :data:`RENDERER_NAME`: the
  chat template of ``chat_template`` (a tools block first, ``<|im_start|>ROLE\\nCONTENT`` and ``<|im_end|>``, or
  ``<tool_call>`` after an assistant's call), so a prompt it builds is the token list the OpenAI surface samples
  from. A ``<tool_call>`` token calls the tool the conversation offered (the only one, as the served policy does).
"""

from __future__ import annotations

import contextvars
import json
from pathlib import Path
from typing import Any

import tinker
from tinker_cookbook import renderers
from tinker_cookbook.renderers.base import (
    Message,
    ParseTermination,
    RenderContext,
    RenderedMessage,
    Renderer,
    ToolCall,
    ToolSpec,
)

from local_stack.tiny_policy.chat_template import SPECIAL_TOKENS, ChatTokenizer, _text_of
from local_stack.tiny_policy.server import called_tool

__all__ = ["RENDERER_NAME", "TinyPolicyRenderer", "register", "save_tokenizer"]

#: The name to give ``rollout_engine.renderer_name`` (registered by :func:`register`).
RENDERER_NAME = "tiny_policy"
#: The tools the conversation being rendered offered (a request's task sees its own).
_OFFERED_TOOLS: contextvars.ContextVar[tuple[dict[str, Any], ...]] = contextvars.ContextVar(
    "tiny_policy_tools", default=()
)


def save_tokenizer(path: Path) -> Path:
    """Write the tiny policy's tokenizer as a Hugging Face directory at ``path``; return ``path``.

    ``encode`` and ``decode`` give :class:`ChatTokenizer`'s ids and text (special tokens are single ids)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chat = ChatTokenizer()
    vocab = {chat.piece(index): index for index in range(chat.vocab_size)}
    model = Tokenizer(models.WordLevel(vocab, unk_token=SPECIAL_TOKENS[0]))
    model.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    model.decoder = decoders.Fuse()
    model.add_special_tokens(list(SPECIAL_TOKENS))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=model, bos_token=SPECIAL_TOKENS[0], eos_token=SPECIAL_TOKENS[2], pad_token=SPECIAL_TOKENS[2]
    )
    tokenizer.save_pretrained(path)
    return path


class TinyPolicyRenderer(Renderer):
    """The tiny policy's chat template as a tinker-cookbook renderer (see the module docstring)."""

    def __init__(self, tokenizer: Any) -> None:
        super().__init__(tokenizer)
        self._chat = ChatTokenizer()

    @property
    def _bos_tokens(self) -> list[int]:
        return [self._chat.bos_id]

    @property
    def has_extension_property(self) -> bool:
        return True

    def get_stop_sequences(self) -> list[int]:
        return [self._chat.im_end_id, self._chat.tool_call_id]

    def render_message(self, message: Message, ctx: RenderContext) -> RenderedMessage:
        end = self._chat.tool_call_id if message["role"] == "assistant" and message.get("tool_calls") else None
        header = [self._chat.im_start_id, *self._chat.encode(f"{message['role']}\n")]
        output = [*self._chat.encode(_text_of(message.get("content"))), end or self._chat.im_end_id]
        return RenderedMessage(
            header=tinker.EncodedTextChunk(tokens=header), output=[tinker.EncodedTextChunk(tokens=output)]
        )

    def create_conversation_prefix_with_tools(self, tools: list[ToolSpec], system_prompt: str = "") -> list[Message]:
        offered = [{"type": "function", "function": {"name": tool["name"]}} for tool in tools]
        _OFFERED_TOOLS.set(tuple(offered))
        names = ", ".join(tool["name"] for tool in tools)
        prefix = [Message(role="system", content=f"tools: {names}")] if tools else []
        return prefix + ([Message(role="system", content=system_prompt)] if system_prompt else [])

    def parse_response(self, response: list[int]) -> tuple[Message, ParseTermination]:
        stopped = bool(response) and response[-1] in (self._chat.im_end_id, self._chat.tool_call_id)
        body = response[:-1] if stopped else response
        message = Message(role="assistant", content=self._chat.decode(body))
        if not stopped:
            return message, ParseTermination.MALFORMED
        if response[-1] == self._chat.tool_call_id:
            name = called_tool(_OFFERED_TOOLS.get(), "auto")
            if name:
                message["tool_calls"] = [ToolCall(function=ToolCall.FunctionBody(name=name, arguments=json.dumps({})))]
        return message, ParseTermination.STOP_SEQUENCE


def register() -> str:
    """Add :class:`TinyPolicyRenderer` to tinker-cookbook's renderers; return its name (idempotent)."""
    renderers.register_renderer(RENDERER_NAME, lambda tokenizer, image_processor=None: TinyPolicyRenderer(tokenizer))
    return RENDERER_NAME
