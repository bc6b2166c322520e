"""Agent-side SDK: a decorator swap turns an AgentCore agent into a fire-and-forget RL rollout service.

Drop-in compatible with agentcore-rl-toolkit (ART) 0.2.0, module for module on the agent side:

- :class:`AgentCoreRLApp`: a ``BedrockAgentCoreApp`` with ``@app.rollout_entrypoint``. Each invocation
  answers at once, runs the handler in the background and stores exactly one result object at
  ``{exp_id}/{input_id}/{session_id}.json`` (first writer wins).
- :class:`RewardFunction`: the reward interface (``__call__(**kwargs) -> float | list[float]``).
- :class:`AgentCoreRuntimeApp`, :class:`AgentCoreHttpClient`, :class:`InvocationHandle`, :class:`InvocationError`:
  agents that keep ``@app.entrypoint``, with invocations that can be started and looked up (``agent_app.runtime``).
- ``agent_app.logging``: ``configure_logging``, ``CorrelatedFormatter`` (JSON log lines with ACR's ids).
- :func:`openai_sampling_kwargs`: ``_rollout.sampling_params`` as an OpenAI-compatible client's keywords
  (server-specific ones such as ``top_k`` under ``extra_body``).

ART's trainer-side names (``RolloutClient``, ``RolloutFuture``, ``BatchResult``, ``AsyncBatchResult``,
``BatchItem``) are in ``trainer_client``.
"""

from agent_app._app import AgentCoreRLApp
from agent_app._reward import RewardFunction
from agent_app._sampling import openai_sampling_kwargs
from agent_app.runtime import AgentCoreHttpClient, AgentCoreRuntimeApp, InvocationError, InvocationHandle

__all__ = [
    "AgentCoreHttpClient",
    "AgentCoreRLApp",
    "AgentCoreRuntimeApp",
    "InvocationError",
    "InvocationHandle",
    "RewardFunction",
    "openai_sampling_kwargs",
]
