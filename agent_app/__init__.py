"""Agent-side SDK: a decorator swap turns an AgentCore agent into a fire-and-forget RL rollout service.

Drop-in compatible with agentcore-rl-toolkit (ART):

- :class:`AgentCoreRLApp`: a ``BedrockAgentCoreApp`` with ``@app.rollout_entrypoint``. Each invocation
  answers at once, runs the handler in the background and stores exactly one result object at
  ``{exp_id}/{input_id}/{session_id}.json`` (first writer wins).
- :class:`RewardFunction`: the reward interface (``__call__(**kwargs) -> float | list[float]``).
- :func:`openai_sampling_kwargs`: ``_rollout.sampling_params`` as an OpenAI-compatible client's keywords
  (server-specific ones such as ``top_k`` under ``extra_body``).
"""

from agent_app._app import AgentCoreRLApp
from agent_app._reward import RewardFunction
from agent_app._sampling import openai_sampling_kwargs

__all__ = ["AgentCoreRLApp", "RewardFunction", "openai_sampling_kwargs"]
