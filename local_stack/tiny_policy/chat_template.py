"""The tiny policy's tokenizer and chat template: one id per character, exact and reversible.

Vocabulary (:data:`VOCAB_SIZE` = 100 ids): four special tokens, then the 96 characters printable ASCII
(space to ``~``) and newline, one id each. ``decode(encode(text)) == text`` for every text in the
vocabulary and ``encode(decode(ids)) == ids`` for every id list: special tokens are written as their text
(``<|im_end|>``) and that text is read back as the special token, as Hugging Face tokenizers do. Text with
other characters is refused (:class:`VocabularyError`), never silently replaced.

Chat template (ChatML-style; the roles are plain text)::

    <|bos|>
    <|im_start|>system\\ntools: NAME[, NAME...]<|im_end|>        only when the request offers tools
    <|im_start|>ROLE\\nCONTENT<|im_end|>                          user, system and tool messages
    <|im_start|>assistant\\nCONTENT<|im_end|>                     an answer
    <|im_start|>assistant\\nCONTENT<tool_call>                    a tool call
    <|im_start|>assistant\\n                                      the generation prompt

A turn ends at ``<|im_end|>`` (an answer, ``finish_reason: stop``) or at ``<tool_call>`` (a call,
``finish_reason: tool_calls``): one token is all a tiny model needs to call a tool. The call goes to the
tool ``tool_choice`` names, else to the only tool offered, with arguments ``{}``; the text before it is
the message's content. Rendering the returned assistant message gives back exactly the tokens the model
sampled, stop token included, so turn k+1's prompt extends turn k's prompt and completion token for token.
A turn cut by ``max_tokens`` has no stop token; its rendering adds ``<|im_end|>``, which a trainer sees as
one spliced token (mask 0).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "BOS",
    "IM_END",
    "IM_START",
    "SPECIAL_TOKENS",
    "TOOL_CALL",
    "VOCAB_SIZE",
    "ChatTokenizer",
    "VocabularyError",
    "tool_names",
]

BOS = "<|bos|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
TOOL_CALL = "<tool_call>"
SPECIAL_TOKENS = (BOS, IM_START, IM_END, TOOL_CALL)
_CHARACTERS = "\n" + "".join(chr(code) for code in range(32, 127))
VOCAB_SIZE = len(SPECIAL_TOKENS) + len(_CHARACTERS)
_PIECES = re.compile("|".join(re.escape(token) for token in SPECIAL_TOKENS) + "|.", re.DOTALL)


class VocabularyError(ValueError):
    """Text has a character outside the tiny policy's vocabulary (printable ASCII and newline)."""


class ChatTokenizer:
    """Character ids, special tokens and the chat template (see the module docstring)."""

    def __init__(self) -> None:
        pieces: list[str] = [*SPECIAL_TOKENS, *_CHARACTERS]
        self._ids = {piece: index for index, piece in enumerate(pieces)}
        self._pieces = pieces
        self.bos_id, self.im_start_id, self.im_end_id, self.tool_call_id = (self._ids[t] for t in SPECIAL_TOKENS)
        self.stop_ids = frozenset({self.im_end_id, self.tool_call_id})

    @property
    def vocab_size(self) -> int:
        """How many ids there are."""
        return len(self._pieces)

    def encode(self, text: str) -> list[int]:
        """Return the ids of ``text`` (special-token text becomes the special token).

        Raises:
            VocabularyError: a character is not printable ASCII or newline.
        """
        ids = []
        for piece in _PIECES.findall(text):
            index = self._ids.get(piece)
            if index is None:
                raise VocabularyError(
                    f"character {piece!r} is outside the tiny policy's vocabulary (printable ASCII and newline); "
                    "send ASCII text"
                )
            ids.append(index)
        return ids

    def piece(self, token_id: int) -> str:
        """Return the text of one id."""
        return self._pieces[token_id]

    def decode(self, ids: Iterable[int]) -> str:
        """Return the text of ``ids`` (special tokens as their text)."""
        return "".join(self._pieces[index] for index in ids)

    def render_prompt(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()
    ) -> list[int]:
        """Return the prompt ids of a chat request: the rendered messages and the generation prompt."""
        ids = [self.bos_id]
        names = tool_names(tools)
        if names:
            ids += self._block("system", "tools: " + ", ".join(names), self.im_end_id)
        for message in messages:
            role = str(message.get("role", ""))
            content = _text_of(message.get("content"))
            if role == "assistant":
                end = self.tool_call_id if message.get("tool_calls") else self.im_end_id
                ids += self._block(role, content, end)
            else:
                ids += self._block(role, content, self.im_end_id)
        return ids + [self.im_start_id, *self.encode("assistant\n")]

    def _block(self, role: str, content: str, end: int) -> list[int]:
        return [self.im_start_id, *self.encode(f"{role}\n{content}"), end]


def tool_names(tools: Sequence[Mapping[str, Any]]) -> list[str]:
    """Return the function names of an OpenAI ``tools`` list, in order."""
    return [str((tool.get("function") or {}).get("name", "")) for tool in tools]


def _text_of(content: Any) -> str:
    """A message's content as text: a string, the text parts of a list, or JSON for anything else."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(part, Mapping) for part in content):
        return "".join(str(part.get("text", "")) for part in content if part.get("type", "text") == "text")
    return json.dumps(content, sort_keys=True)
