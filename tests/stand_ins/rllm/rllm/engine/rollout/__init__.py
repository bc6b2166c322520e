"""Stand-in of ``rllm.engine.rollout``: ``ModelOutput``, ``RolloutEngine`` and, imported on first use as rLLM's,
``TinkerEngine``."""

from .rollout_engine import ModelOutput, RolloutEngine

__all__ = ["ModelOutput", "RolloutEngine", "TinkerEngine"]


def __getattr__(name):
    if name == "TinkerEngine":
        from .tinker_engine import TinkerEngine

        return TinkerEngine
    raise AttributeError(name)
