"""Invocations of ordinary ``@app.entrypoint`` agents that can be started, looked up and awaited (ART's ``runtime``).

- :class:`AgentCoreRuntimeApp`: a ``BedrockAgentCoreApp`` whose invocations run in the background on request
  and are recorded, so a caller can get their state later.
- :class:`AgentCoreHttpClient`: invokes such agents (and plain ones) from asyncio; background invocations come
  back as :class:`InvocationHandle`; failures raise :class:`InvocationError`.

Same names, arguments and wire protocol as agentcore-rl-toolkit 0.2.0's ``agentcore_rl_toolkit.runtime``.
"""

from agent_app.runtime._app import AgentCoreRuntimeApp
from agent_app.runtime._client import AgentCoreHttpClient, InvocationError, InvocationHandle

__all__ = ["AgentCoreHttpClient", "AgentCoreRuntimeApp", "InvocationError", "InvocationHandle"]
