"""A deterministic stand-in tokenizer: text pieces and stable ids, no vocabulary file.

Text splits into pieces with one regular expression: a run of letters, a run of digits, one space
followed by a run of letters or digits, a run of other spaces, or one other character. A piece's id is
``FIRST_TEXT_ID + int(blake2b(piece)[:4]) % (VOCAB_SIZE - FIRST_TEXT_ID)``: the same piece always gets
the same id, in every process. Ids below :data:`FIRST_TEXT_ID` are the special tokens of the chat
template. Ids are not decodable on their own (hashing loses the piece); the endpoint always returns the
text alongside, as a real server would.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

__all__ = ["BOS_ID", "EOS_ID", "FIRST_TEXT_ID", "IM_END_ID", "IM_START_ID", "VOCAB_SIZE", "Token", "Tokenizer"]

VOCAB_SIZE = 32_000
BOS_ID = 1
EOS_ID = 2
IM_START_ID = 3
IM_END_ID = 4
FIRST_TEXT_ID = 16
_SPECIAL_TEXT = {BOS_ID: "<s>", EOS_ID: "</s>", IM_START_ID: "<|im_start|>", IM_END_ID: "<|im_end|>"}
_PIECE_RE = re.compile(r" ?[A-Za-z]+| ?\d+|\s+|.", re.DOTALL)


class Token(NamedTuple):
    """One token: its id and the text it stands for."""

    id: int
    text: str


class Tokenizer:
    """Split text into :class:`Token` s and render chat prompts the same way every time."""

    def piece_id(self, piece: str) -> int:
        """Return the stable id of one text piece."""
        digest = hashlib.blake2b(piece.encode(), digest_size=4).digest()
        return FIRST_TEXT_ID + int.from_bytes(digest, "big") % (VOCAB_SIZE - FIRST_TEXT_ID)

    def tokenize(self, text: str) -> list[Token]:
        """Return the tokens of ``text``; their texts concatenate back to ``text``."""
        return [Token(self.piece_id(piece), piece) for piece in _PIECE_RE.findall(text)]

    def encode(self, text: str) -> list[int]:
        """Return the token ids of ``text``."""
        return [token.id for token in self.tokenize(text)]

    def special(self, token_id: int) -> Token:
        """Return a special token (``EOS_ID``, ``IM_END_ID``, ...)."""
        return Token(token_id, _SPECIAL_TEXT[token_id])

    def chat_prompt_ids(
        self, messages: Sequence[Mapping[str, Any]], tools: Iterable[Mapping[str, Any]] = ()
    ) -> list[int]:
        """Return the prompt ids of a chat request, ChatML-style.

        ``<s>``, then per message ``<|im_start|>`` + role + newline + content + ``<|im_end|>``, tool
        specs as a JSON system block first, and a trailing ``<|im_start|>assistant`` + newline. Content
        parts, tool calls and tool call ids are rendered as JSON text.
        """
        ids = [BOS_ID]
        tools = list(tools)
        blocks: list[tuple[str, str]] = []
        if tools:
            blocks.append(("system", "Tools: " + json.dumps(tools, sort_keys=True)))
        for message in messages:
            blocks.append((str(message.get("role", "")), _render_content(message)))
        for role, text in blocks:
            ids += [IM_START_ID, *self.encode(f"{role}\n{text}"), IM_END_ID]
        return ids + [IM_START_ID, *self.encode("assistant\n")]


def _render_content(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    text = content if isinstance(content, str) else json.dumps(content, sort_keys=True) if content else ""
    if message.get("tool_calls"):
        text += json.dumps(message["tool_calls"], sort_keys=True)
    if message.get("tool_call_id"):
        text = f"[{message['tool_call_id']}] {text}"
    return text
