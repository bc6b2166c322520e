"""An ``agent_app`` agent whose behaviour the payload scripts, for the end-to-end tests.

``payload["action"]``: ``succeed`` (default: return ``reward``), ``raise`` (an exception: ``agent_error``),
``crash`` (the process dies without a result, like an OOM-killed microVM). ``sleep_s`` delays the end.
The result records when the handler ran and in which process.
"""

import asyncio
import os
import time

from agent_app import AgentCoreRLApp

app = AgentCoreRLApp()


@app.rollout_entrypoint
async def invoke(payload):
    """Do what the payload says."""
    started = time.time()
    await asyncio.sleep(float(payload.get("sleep_s", 0)))
    action = payload.get("action", "succeed")
    if action == "raise":
        raise RuntimeError("scripted failure")
    if action == "crash":
        os._exit(3)
    reward = float(payload.get("reward", 1.0))
    return {"rewards": reward, "ran_from": started, "ran_to": time.time(), "pid": os.getpid()}


if __name__ == "__main__":
    app.run()
