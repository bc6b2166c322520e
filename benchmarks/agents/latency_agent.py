"""The latency benchmark's agent: a few streamed model calls through ``_rollout.base_url``, then idle to a length.

``payload["calls"]`` streamed chat completions (default 2; Strands streams too, so each trace is written the
way the gateway writes streamed traces), then it sleeps until ``payload["duration_s"]`` seconds passed since
the handler started, and returns reward 1. The model is the stand-in endpoint behind the token gateway.
"""

import asyncio
import time

import httpx

from agent_app import AgentCoreRLApp

app = AgentCoreRLApp()


@app.rollout_entrypoint
async def invoke(payload):
    """Call the model ``calls`` times, streamed, then wait out ``duration_s``."""
    started = time.monotonic()
    rollout = payload["_rollout"]
    request = {
        "model": rollout["model_id"],
        "messages": [{"role": "user", "content": payload.get("prompt", "What is 2 + 3?")}],
        "stream": True,
    }
    # The gateway is plain HTTP on 127.0.0.1: a client with verification on would load the CA bundle into a TLS
    # context first (28% of a session's CPU in the batch of 32, where the agents share 2 cores with the stack).
    headers = {"Authorization": f"Bearer {rollout.get('api_key') or 'none'}"}  # the experiment's model-call key
    async with httpx.AsyncClient(timeout=60, trust_env=False, verify=False, headers=headers) as http:
        for _ in range(int(payload.get("calls", 2))):
            async with http.stream("POST", f"{rollout['base_url']}/chat/completions", json=request) as response:
                response.raise_for_status()
                async for _line in response.aiter_lines():
                    pass
    await asyncio.sleep(max(0.0, float(payload.get("duration_s", 0)) - (time.monotonic() - started)))
    return {"rewards": 1.0}


if __name__ == "__main__":
    app.run()
