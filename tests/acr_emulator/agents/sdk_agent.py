"""A plain ``bedrock_agentcore.runtime.BedrockAgentCoreApp`` agent, as users write them for ACR.

``{"stream": n}`` answers with n server-sent events (a generator handler); anything else with its pid and
the session id the SDK read from the ACR header.
"""

import os

from bedrock_agentcore.runtime import BedrockAgentCoreApp

app = BedrockAgentCoreApp()


@app.entrypoint
def handler(payload, context):
    if "stream" in payload:
        return ({"i": i, "pid": os.getpid()} for i in range(payload["stream"]))
    return {"pid": os.getpid(), "session_id": context.session_id, "echo": payload}


if __name__ == "__main__":
    # BedrockAgentCoreApp.run binds 127.0.0.1 unless DOCKER_CONTAINER is set; the emulator picks the port.
    app.run(port=int(os.environ["PORT"]))
