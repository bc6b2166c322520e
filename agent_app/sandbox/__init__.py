"""ART 0.2.0's sandbox daemon on ``agent_app``: a container that runs the trainer's commands in an ACR session.

- :class:`SandboxApp`: serves ART's sandbox protocol (``rollout_contract.sandbox``) on ``/invocations``, so ART's
  unmodified ``agentcore_rl_toolkit.sandbox.SandboxClient`` and ours (``trainer_client.sandbox``) drive it.
- ``python -m agent_app.sandbox``: serve it on ``$PORT`` (default 8080), as the sandbox image does
  (``agent_app/sandbox/Dockerfile``).
"""

from agent_app.sandbox._app import SandboxApp

__all__ = ["SandboxApp"]
