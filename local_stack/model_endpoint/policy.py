"""The stand-in policy: solves its word problems the way a small tool-using model would.

Offline and seeded, it stands in for vLLM or SGLang so the whole pipeline runs without a GPU:

1. It looks for one of its word problems (:mod:`local_stack.problems`) in the last user
   message (any line of it, via :func:`~local_stack.problems.parse_problem`).
2. With no tool result yet and a tool named ``calculator`` on offer (and ``tool_choice`` not ``"none"``),
   it calls ``calculator`` with ``{"expression": <the problem's expression>}``.
3. Given the tool's result (or with no calculator on offer, computing the value itself), it answers with
   a short explanation and a final ``#### N`` line.
4. With probability ``p = MISTAKE_SCALE * (1 - exp(-temperature))`` it makes a mistake: ``N`` is off by a
   small non-zero amount. ``p`` is 0 at temperature 0, about 0.32 at 1.0 and 0.43 at 2.0.
5. Any other prompt gets a polite answer saying what it can do.

Log-probabilities are consistent with what was chosen: the first token of the answer number carries
``log(1 - p)`` (right answer) or ``log(p)`` (mistake); every other token carries
``-temperature * 0.05 * (1 + u)`` with ``u`` uniform in [0, 1) (0 at temperature 0: greedy).
The completion ends with the end-of-sequence token, as vLLM's ``token_ids`` do.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from local_stack.model_endpoint.tokenizer import EOS_ID, Token, Tokenizer
from local_stack.problems import Problem, parse_problem

__all__ = [
    "CALCULATOR_TOOL",
    "MISTAKE_SCALE",
    "Part",
    "Sampled",
    "Sampler",
    "StandInPolicy",
    "Turn",
    "message_text",
    "mistake_probability",
]

CALCULATOR_TOOL = "calculator"
MISTAKE_SCALE = 0.5
_TOKEN_NOISE = 0.05
_NUMBER_RE = re.compile(r"-?\d+(?:\.\d+)?")
_OFFSETS = (-10, -2, -1, 1, 2, 10)
POLITE_ANSWER = (
    "Hello! I am the local stand-in model. I solve the arithmetic word problems that `rollouts demo` sends, "
    "and I could not find one in your message. Send me one of those problems and I will work it out."
)


def mistake_probability(temperature: float) -> float:
    """Return the chance of a wrong final answer at ``temperature``: ``0.5 * (1 - exp(-T))``."""
    return MISTAKE_SCALE * (1.0 - math.exp(-max(0.0, temperature)))


class Sampled(NamedTuple):
    """A chosen token and its log-probability."""

    token: Token
    logprob: float


class Part(NamedTuple):
    """A stretch of the completion that streams as one kind of delta.

    ``kind`` is ``"text"`` (content), ``"tool_name"`` (the tool call's opening: id and name),
    ``"tool_arguments"`` (the arguments JSON) or ``"end"`` (closing tokens and end of sequence).
    """

    kind: str
    text: str
    tokens: list[Sampled]


class ToolCall(NamedTuple):
    """A function call the policy makes."""

    id: str
    name: str
    arguments: str


class Turn(NamedTuple):
    """One assistant turn: its parts in order, the tool call if any, and why it stopped."""

    parts: list[Part]
    tool_call: ToolCall | None
    finish_reason: str

    @property
    def content(self) -> str | None:
        """The text content (None for a tool call with no text before it, as OpenAI returns it)."""
        text = "".join(part.text for part in self.parts if part.kind == "text")
        if self.tool_call is not None and not text:
            return None
        return text

    @property
    def tokens(self) -> list[Sampled]:
        """Every completion token, end of sequence included."""
        return [sampled for part in self.parts for sampled in part.tokens]


class StandInPolicy:
    """Decide the next assistant turn of a chat request (see the module docstring for the rules)."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer

    def respond(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]],
        tool_choice: Any,
        temperature: float,
        rng: random.Random,
    ) -> Turn:
        """Return the assistant's next turn for ``messages``, drawing every random choice from ``rng``."""
        sampler = Sampler(self._tokenizer, temperature, rng)
        problem = _find_problem(messages)
        if problem is None:
            return sampler.text_turn([POLITE_ANSWER])
        tool_result = _last_tool_result(messages)
        offers_calculator = tool_choice != "none" and any(
            (tool.get("function") or {}).get("name") == CALCULATOR_TOOL for tool in tools
        )
        if tool_result is None and offers_calculator:
            return sampler.tool_turn(CALCULATOR_TOOL, {"expression": problem.expression})
        value = _number(tool_result) if tool_result is not None else None
        if value is None:
            value = problem.answer
            lead = f"Working it out: {problem.expression} = {value}."
        else:
            lead = f"The calculator says {problem.expression} = {value}."
        p = mistake_probability(temperature)
        mistaken = rng.random() < p
        answer = value + rng.choice([o for o in _OFFSETS if value + o >= 0]) if mistaken else value
        decision = math.log(p) if mistaken else math.log1p(-p)
        return sampler.text_turn(
            [f"{lead} So the answer is", f" {answer}", f".\n#### {answer}"], decision_at=1, decision=decision
        )


class Sampler:
    """Turn chosen text into tokens with log-probabilities."""

    def __init__(self, tokenizer: Tokenizer, temperature: float, rng: random.Random) -> None:
        self._tokenizer = tokenizer
        self._temperature = max(0.0, temperature)
        self._rng = rng

    def _ordinary(self, token: Token) -> Sampled:
        return Sampled(token, -self._temperature * _TOKEN_NOISE * (1.0 + self._rng.random()))

    def _sample(self, text: str) -> list[Sampled]:
        return [self._ordinary(token) for token in self._tokenizer.tokenize(text)]

    def _end(self) -> Part:
        return Part("end", "", [self._ordinary(self._tokenizer.special(EOS_ID))])

    def text_turn(self, segments: Sequence[str], *, decision_at: int | None = None, decision: float = 0.0) -> Turn:
        """A text answer; the first token of ``segments[decision_at]`` carries ``decision`` as its logprob."""
        parts = []
        for index, segment in enumerate(segments):
            sampled = self._sample(segment)
            if index == decision_at and sampled:
                sampled[0] = Sampled(sampled[0].token, decision)
            parts.append(Part("text", segment, sampled))
        return Turn([*parts, self._end()], None, "stop")

    def tool_turn(self, name: str, arguments: Mapping[str, Any]) -> Turn:
        """A call of tool ``name``, rendered as ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``."""
        call = ToolCall(f"call_{self._rng.getrandbits(96):024x}", name, json.dumps(dict(arguments)))
        parts = [
            Part("tool_name", name, self._sample(f'<tool_call>{{"name": "{name}", "arguments": ')),
            Part("tool_arguments", call.arguments, self._sample(call.arguments)),
        ]
        end = self._end()
        parts.append(Part("end", "", self._sample("}</tool_call>") + end.tokens))
        return Turn(parts, call, "tool_calls")


def message_text(content: Any) -> str:
    """The text of a message's ``content``: a string, or the ``text`` of its parts joined by newlines."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return ""


def _find_problem(messages: Sequence[Mapping[str, Any]]) -> Problem | None:
    user_texts = [message_text(m.get("content")) for m in messages if m.get("role") == "user"]
    if not user_texts:
        return None
    text = user_texts[-1]
    for candidate in (text, *text.splitlines()):
        problem = parse_problem(candidate)
        if problem is not None:
            return problem
    return None


def _last_tool_result(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """The content of the last tool message after the last user message, or None."""
    for message in reversed(messages):
        role = message.get("role")
        if role == "tool":
            return message_text(message.get("content"))
        if role == "user":
            return None
    return None


def _number(text: str) -> int | None:
    """The last number in a tool result, as an integer; None when there is none or it is fractional."""
    numbers = _NUMBER_RE.findall(text)
    if not numbers:
        return None
    value = float(numbers[-1])
    return int(value) if value.is_integer() else None
