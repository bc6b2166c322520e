"""Scripted answers for the stand-in: how an agent of your own gets sensible replies on the local stack.

A script (``--model-script FILE``, JSON) lists conversations. Each has ``match``, a text its user message
contains, and ``answers``, the alternative ways the model may answer it; an answer is the assistant's turns
in order, each ``{"content": TEXT}`` or ``{"tool": NAME, "arguments": {...}}`` (a tool call)::

    {"conversations": [{"match": "def add(a, b)", "answers": [
        [{"tool": "run_python", "arguments": {"code": "..."}}, {"content": "```python ...```"}],
        [{"content": "```python ...```"}]]}]}

For a request whose last user message contains a ``match``: at the first assistant turn an answer is drawn
(the first at temperature 0, else uniformly, from the request's seeded random source, so samples of one
prompt differ); later turns continue the answer whose turns so far are what the conversation holds. A
conversation that left every answer, or went past its last turn, gets a short text saying so.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from local_stack.model_endpoint.policy import message_text

__all__ = ["Script", "ScriptError", "ScriptedTurn"]

END_OF_SCRIPT = "(The scripted stand-in has no more turns for this conversation.)"


class ScriptError(ValueError):
    """A script file is missing, not JSON, or not a script (the message says which field)."""


class ScriptedTurn(BaseModel):
    """One assistant turn: text content, or a call of tool ``tool`` with ``arguments``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    content: str | None = None
    tool: str | None = None
    arguments: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_kind(self) -> ScriptedTurn:
        if (self.content is None) == (self.tool is None):
            raise ValueError('a turn is either {"content": TEXT} or {"tool": NAME, "arguments": {...}}')
        return self

    def said_by(self, message: Mapping[str, Any]) -> bool:
        """Whether the assistant ``message`` (OpenAI's shape) is this turn."""
        calls = message.get("tool_calls") or []
        if self.tool is not None:
            if not calls:
                return False
            function = calls[0].get("function") or {}
            try:
                arguments = json.loads(function.get("arguments") or "{}")
            except json.JSONDecodeError:
                return False
            return bool(function.get("name") == self.tool and arguments == self.arguments)
        return not calls and message_text(message.get("content")).strip() == (self.content or "").strip()


class _Conversation(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    match: str = Field(min_length=1)
    answers: tuple[tuple[ScriptedTurn, ...], ...] = Field(min_length=1)


class Script(BaseModel):
    """The scripted conversations; :meth:`next_turn` picks the turn for a request."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    conversations: tuple[_Conversation, ...] = Field(min_length=1)

    @classmethod
    def load(cls, path: str | Path) -> Script:
        """Read a script file.

        Raises:
            ScriptError: the file is missing, not JSON, or not shaped as a script.
        """
        path = Path(path)
        try:
            return cls.model_validate_json(path.read_bytes())
        except OSError as exc:
            raise ScriptError(f"model script {path}: cannot read it ({exc.strerror})") from exc
        except ValidationError as exc:
            raise ScriptError(
                f"model script {path} is not a script (see local_stack.model_endpoint.script):\n{exc}"
            ) from exc

    def next_turn(
        self, messages: Sequence[Mapping[str, Any]], *, temperature: float, rng: random.Random
    ) -> ScriptedTurn | None:
        """The scripted turn that answers ``messages``, or ``None`` when no conversation matches.

        A conversation that matches but whose script it left (or finished) gets :data:`END_OF_SCRIPT`.
        """
        last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=None)
        if last_user is None:
            return None
        text = message_text(messages[last_user].get("content"))
        conversation = next((c for c in self.conversations if c.match in text), None)
        if conversation is None:
            return None
        said = [m for m in messages[last_user + 1 :] if m.get("role") == "assistant"]
        if not said:
            answers = conversation.answers
            return answers[0][0] if temperature <= 0 else rng.choice(answers)[0]
        for answer in conversation.answers:
            if len(answer) > len(said) and all(turn.said_by(m) for turn, m in zip(answer, said, strict=False)):
                return answer[len(said)]
        return ScriptedTurn(content=END_OF_SCRIPT)
