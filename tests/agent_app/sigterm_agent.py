"""An agent whose handler never finishes by itself: run as a process by the SIGTERM test."""

import threading

from agent_app import AgentCoreRLApp

app = AgentCoreRLApp()
forever = threading.Event()


@app.rollout_entrypoint
def solve(payload):
    forever.wait()
    return {"rewards": 1.0}


if __name__ == "__main__":
    app.run(log_level="info")
