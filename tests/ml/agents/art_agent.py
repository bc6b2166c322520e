"""agentcore-rl-toolkit 0.2.0's own ``AgentCoreRLApp``, unmodified, as an ART user deploys it: ``app.run()`` (8080).

Its handler plays the differential cases of ``art_cases.py`` (``payload["case"]``).
"""

from agentcore_rl_toolkit import AgentCoreRLApp
from art_cases import outcome

app = AgentCoreRLApp()


@app.rollout_entrypoint
def invoke(payload):
    return outcome(payload)


if __name__ == "__main__":
    app.run()
