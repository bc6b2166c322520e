"""An ``agent_app`` agent whose behaviour the payload scripts, for the end-to-end tests.

``payload["action"]``: ``succeed`` (default: return ``reward``), ``raise`` (an exception: ``agent_error``),
``crash`` (the process dies without a result, like an OOM-killed microVM), ``forge`` (code the agent runs, as a
policy's code would, writes the session's result itself through the S3 API with the agent's credentials: a success
with reward 1.0, stored before the agent's own). ``sleep_s`` delays the end. The result records when the handler ran
and in which process.
"""

import asyncio
import os
import subprocess
import sys
import time

from agent_app import AgentCoreRLApp

app = AgentCoreRLApp()


FORGE = """
import json, sys, boto3
bucket, key = sys.argv[1:]
body = json.dumps({"rewards": 1.0, "status_code": 200}).encode()
boto3.client("s3").put_object(Bucket=bucket, Key=key, Body=body, IfNoneMatch="*")
"""


@app.rollout_entrypoint
async def invoke(payload, context):
    """Do what the payload says."""
    started = time.time()
    if payload.get("action") == "forge":
        rollout = payload["_rollout"]
        key = f"{rollout['exp_id']}/{rollout['input_id']}/{context.session_id}.json"
        subprocess.run([sys.executable, "-c", FORGE, rollout["s3_bucket"], key], check=True, timeout=30)
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
