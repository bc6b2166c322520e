"""The same agent as ``art_agent.py`` on ``agent_app``: only the import differs, ``app.run()`` included."""

from art_cases import outcome

from agent_app import AgentCoreRLApp

app = AgentCoreRLApp()


@app.rollout_entrypoint
def invoke(payload):
    return outcome(payload)


if __name__ == "__main__":
    app.run()
