"""The math agent in its RL form: ``app.py`` with ``AgentCoreRLApp`` and ``@app.rollout_entrypoint``.

The trainer's ``_rollout`` block names the model (``base_url``, ``model_id``, ``sampling_params``,
``api_key``); the handler returns the reward with the response, and the app stores both in S3.
Run it with ``python examples/math_agent/rl_app.py`` (port from ``PORT``, default 8080).
"""

from __future__ import annotations

from typing import Any

from agent_app import AgentCoreRLApp
from examples.math_agent.agent import build_model, solve
from examples.math_agent.reward import GSM8KReward

app = AgentCoreRLApp()
reward_fn = GSM8KReward()


@app.rollout_entrypoint
async def invoke(payload: dict[str, Any]) -> dict[str, Any]:
    """Answer ``payload["prompt"]`` and score it against ``payload["answer"]``."""
    rollout = payload["_rollout"]
    missing = [name for name in ("base_url", "model_id") if not rollout.get(name)]
    if missing:
        raise ValueError(
            f"_rollout lacks {', '.join(missing)}: give them to the trainer, e.g. "
            "RolloutClient.for_experiment(..., model_id=...) or `rollouts eval --model-id ...`"
        )
    model = build_model(
        base_url=rollout["base_url"],
        model_id=rollout["model_id"],
        api_key=rollout.get("api_key") or "EMPTY",
        sampling_params=rollout.get("sampling_params"),
    )
    response = await solve(model, payload["prompt"])
    reward = reward_fn(response=response, ground_truth=payload["answer"])
    return {"rewards": reward, "response": response, "answer": payload["answer"]}


if __name__ == "__main__":
    app.run()
