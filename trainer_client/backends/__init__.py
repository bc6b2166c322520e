"""Adapters that put the event-driven client under existing training frameworks.

One module per framework, each imported only when used (they import the framework), so
``import trainer_client`` never needs one:

- :mod:`trainer_client.backends.assembly`: framework-free multi-turn token assembly (traces -> rows of
  prompt ids, response ids, response mask, aligned logprobs), shared by every backend.
- :mod:`trainer_client.backends.rllm`: rLLM's remote runtime (``rllm.remote_runtime.backend=agentcore_events``).
- :mod:`trainer_client.backends.art`: a ``RolloutSession`` for agentcore-rl-toolkit 0.2.0's own loops.
- :mod:`trainer_client.backends.verl`: a verl ``AgentLoopBase`` (``verl`` 0.9.1).
- :mod:`trainer_client.backends.slime`: slime's per-sample ``generate`` and whole-rollout ``generate_rollout``.
- :mod:`trainer_client.backends.tinker`: training with no cluster through the Tinker API (``tinker`` 0.38.0).
"""
