"""A ``BedrockAgentCoreApp`` agent with the math agent's imports (Strands, its OpenAI model, boto3).

It imports what ``examples/math_agent/rl_app.py`` pays for at start-up but needs no model endpoint, so the
benchmark can time session starts of a realistic agent; it answers with its pid.
"""

import os

import boto3  # noqa: F401
import strands  # noqa: F401
import strands.models.openai  # noqa: F401
from bedrock_agentcore.runtime import BedrockAgentCoreApp

app = BedrockAgentCoreApp()


@app.entrypoint
def handler(payload, context):
    return {"pid": os.getpid(), "session_id": context.session_id}


if __name__ == "__main__":
    app.run(port=int(os.environ["PORT"]))
