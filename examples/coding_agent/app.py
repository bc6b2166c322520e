"""The coding agent in its RL form: ``AgentCoreRLApp`` + ``@app.rollout_entrypoint``.

Payload: ``{"id", "prompt", "tests": ["assert EXPR == LITERAL", ...], "network": false}`` plus the trainer's
``_rollout`` (``base_url``, ``model_id``, ``sampling_params``, ``api_key``). The agent runs the model's code apart
from itself (``agent_app.confinement``: another user, no network unless ``network`` grants it, limits); the reward
is the fraction of the task's tests its solution passes. Run it with ``python examples/coding_agent/app.py`` (port
from ``PORT``, default 8080), or on the local stack with ``rollouts local up --agent examples/coding_agent/app.py``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from openai import AsyncOpenAI

from agent_app import AgentCoreRLApp
from examples.coding_agent.agent import solve
from examples.coding_agent.sandbox import Limits, Sandbox, parse_tests

app = AgentCoreRLApp()


@app.rollout_entrypoint
async def invoke(payload: dict[str, Any], context: Any) -> dict[str, Any]:
    """Solve ``payload["prompt"]`` and score the solution against ``payload["tests"]``."""
    rollout = payload["_rollout"]
    missing = [name for name in ("base_url", "model_id") if not rollout.get(name)]
    if missing:
        raise ValueError(f"_rollout lacks {', '.join(missing)}: the trainer gives them (e.g. --model-id)")
    tests = payload.get("tests")
    if not isinstance(tests, list) or not all(isinstance(test, str) for test in tests):
        raise ValueError('payload["tests"] must be a list of test statements, e.g. ["assert f(1) == 2"]')
    checks = parse_tests(tests)
    network = payload.get("network", False)
    if not isinstance(network, bool):
        raise ValueError(
            'payload["network"] must be true or false: whether the task grants the model\'s code the network'
        )
    sandbox = Sandbox.for_session(context.session_id or "local", Limits(network=network))
    client = AsyncOpenAI(base_url=rollout["base_url"], api_key=rollout.get("api_key") or "EMPTY")
    try:
        attempt = await solve(
            payload["prompt"],
            client=client,
            model_id=rollout["model_id"],
            sandbox=sandbox,
            sampling_params=rollout.get("sampling_params"),
        )
        score = (
            await asyncio.to_thread(sandbox.run_tests, attempt.solution, checks)
            if attempt.solution is not None
            else None
        )
    finally:
        await client.close()
        sandbox.close()
    return {
        "rewards": score.fraction if score is not None else 0.0,
        "tests_passed": score.passed if score is not None else 0,
        "tests_total": len(tests),
        "test_error": score.error if score is not None else "no solution",
        "solution": attempt.solution,
        "turns": attempt.turns,
        "tool_calls": attempt.tool_calls,
        "finish": attempt.finish,
    }


if __name__ == "__main__":
    app.run()
