"""A stock ``BedrockAgentCoreApp`` agent exactly as ACR runs it: ``app.run()`` on port 8080, no ``PORT`` read.

Answers with its pid, the session id the SDK read from the ACR header, and the port its server socket is bound
to (``PORT`` in the emulator, where a bind to 8080 is mapped onto the session's own port).
"""

import os

from bedrock_agentcore.runtime import BedrockAgentCoreApp

app = BedrockAgentCoreApp()


@app.entrypoint
def handler(payload, context):
    return {"pid": os.getpid(), "session_id": context.session_id, "port_env": os.environ.get("PORT")}


if __name__ == "__main__":
    app.run()
