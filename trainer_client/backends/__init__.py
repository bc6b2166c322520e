"""Adapters that put the event-driven client under existing training frameworks.

One module per framework, each imported only when used (they import the framework):

- :mod:`trainer_client.backends.rllm`: rLLM's remote runtime (``rllm.remote_runtime.backend=agentcore_events``).
- :mod:`trainer_client.backends.art`: a ``RolloutSession`` for agentcore-rl-toolkit 0.2.0's own loops.
"""
