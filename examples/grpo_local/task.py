"""The toy agent task: look up a secret digit with a tool, then answer it.

Each episode has a secret digit the model cannot see. The agent offers one tool, ``lookup`` (no
arguments), which returns the secret. A good episode is two model calls: the first ends with a tool call
(the tiny policy's ``<tool_call>`` token), the agent splices the tool's result into the conversation, and
the second call answers with the digit. The tool result is context the model did not sample, so a trainer
must mask it out (mask 0) while it trains on both calls' tokens.

Reward (:class:`LookupReward`, in ``[0, 1]``): ``0.2`` for calling ``lookup``, ``0.2`` for a final answer
that starts with a digit, ``0.6`` when the first digit of the final answer is the secret. An untrained
(random) policy scores about 0.05 on average: it calls the tool in ~8% of episodes and answers right by
chance in ~5%.
"""

from __future__ import annotations

import random
from typing import Any

from agent_app import RewardFunction

__all__ = [
    "LOOKUP_TOOL",
    "MAX_MODEL_CALLS",
    "PROMPT",
    "LookupReward",
    "episode_payloads",
]

PROMPT = "what is the secret? use lookup"
#: The tool in OpenAI's ``tools`` form.
LOOKUP_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Return the secret digit of this episode.",
        "parameters": {"type": "object", "properties": {}},
    },
}
#: Model calls per episode at most (a policy that keeps calling the tool gets no answer reward).
MAX_MODEL_CALLS = 3
TOOL_CALL_REWARD = 0.2
DIGIT_FORMAT_REWARD = 0.2
CORRECT_REWARD = 0.6


def episode_payloads(count: int, *, seed: int) -> list[dict[str, Any]]:
    """Return ``count`` episode payloads with secrets drawn from ``random.Random(seed)``."""
    rng = random.Random(seed)
    return [{"prompt": PROMPT, "secret": str(rng.randrange(10))} for _ in range(count)]


class LookupReward(RewardFunction):
    """The task's reward; see the module docstring."""

    def __call__(self, *, response: str, ground_truth: str, called_tool: bool = False, **kwargs: Any) -> float:
        """Score the final answer ``response`` against the secret ``ground_truth``."""
        digits = [char for char in response if char.isdigit()]
        reward = TOOL_CALL_REWARD if called_tool else 0.0
        if response[:1].isdigit():
            reward += DIGIT_FORMAT_REWARD
        if digits and digits[0] == ground_truth:
            reward += CORRECT_REWARD
        return round(reward, 6)
