"""Stand-in of ``rllm.trainer``: its ``AgentTrainer`` (rLLM's exports ``unified_trainer.AgentTrainer``)."""

from .unified_trainer import AgentTrainer

__all__ = ["AgentTrainer"]
