"""An ``agent_app`` agent for the backend end-to-end tests: one model call at ``_rollout.base_url``, then the script.

The call goes to whatever base URL the framework gave (its gateway session), so the gateway's traces show
that the URL reached the agent as given. ``payload["action"]``: ``succeed`` (default: return ``reward``)
or ``raise`` (``agent_error``); ``sleep_s`` delays the end.
"""

import asyncio

import httpx

from agent_app import AgentCoreRLApp

app = AgentCoreRLApp()


@app.rollout_entrypoint
async def invoke(payload):
    """Call the model once, then do what the payload says."""
    rollout = payload["_rollout"]
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.post(
            f"{rollout['base_url']}/chat/completions",
            json={"model": rollout.get("model_id", "policy"), "messages": [{"role": "user", "content": "1+1?"}]},
            headers={"Authorization": f"Bearer {rollout.get('api_key', 'none')}"},
        )
        response.raise_for_status()
    await asyncio.sleep(float(payload.get("sleep_s", 0)))
    if payload.get("action") == "raise":
        raise RuntimeError("scripted failure")
    return {"rewards": float(payload.get("reward", 1.0)), "metrics": {"model_calls": 1}}


if __name__ == "__main__":
    app.run()
