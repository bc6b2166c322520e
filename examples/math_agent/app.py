"""The math agent in its deployment form: a plain AgentCore app.

The model endpoint comes from the environment (``MODEL_BASE_URL``, ``MODEL_ID``, ``MODEL_API_KEY``).
Compare with ``rl_app.py``: the RL form changes the app class and the decorator, and reads the model
from the payload's ``_rollout`` block.
"""

from __future__ import annotations

import os
from typing import Any

from bedrock_agentcore.runtime import BedrockAgentCoreApp

from examples.math_agent.agent import build_model, solve

app = BedrockAgentCoreApp()


@app.entrypoint
async def invoke(payload: dict[str, Any]) -> dict[str, str]:
    """Answer ``payload["prompt"]``."""
    model = build_model(
        base_url=os.environ.get("MODEL_BASE_URL", "http://127.0.0.1:8000/v1"),
        model_id=os.environ.get("MODEL_ID", "Qwen/Qwen2.5-1.5B-Instruct"),
        api_key=os.environ.get("MODEL_API_KEY", "EMPTY"),
    )
    response = await solve(model, payload["prompt"])
    return {"response": response}


if __name__ == "__main__":
    app.run()
