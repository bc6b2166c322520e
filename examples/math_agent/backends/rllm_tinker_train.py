"""rLLM's Tinker backend on our rollouts, for the math agent (README "Train with no cluster", rLLM).

rLLM's Tinker path is its ``UnifiedTrainer`` with ``TinkerBackend`` on the ``unified`` config with
``rllm/backend=tinker`` (its ``examples/agentcore_math/train_agentcore_math_tinker.py``): the policy trains and
samples on a Tinker endpoint, rLLM's ``TinkerEngine`` renders each agent call with a tinker-cookbook renderer, and
the rollouts run on our experiment (``install()``: ``rllm.remote_runtime.backend=agentcore_events``). The rows are
rLLM's ``gsm8k_agentcore`` dataset (``+dataset=NAME`` trains on another registered one). Run with
``rllm_tinker.sh`` beside this file.
"""

import hydra
from omegaconf import DictConfig

from trainer_client.backends.rllm import install

#: The registered rLLM dataset trained on unless the config's ``dataset`` names another.
DATASET = "gsm8k_agentcore"


def train(config: DictConfig) -> None:
    """Train with rLLM's ``UnifiedTrainer`` and ``TinkerBackend`` on ``config`` (the composed ``unified`` config)."""
    install()  # before rLLM builds its remote runtime
    from rllm.data.dataset import DatasetRegistry
    from rllm.trainer.tinker.tinker_backend import TinkerBackend
    from rllm.trainer.unified_trainer import UnifiedTrainer

    dataset = config.get("dataset", DATASET)
    trainer = UnifiedTrainer(
        backend_cls=TinkerBackend,
        config=config,
        train_dataset=DatasetRegistry.load_dataset(dataset, "train"),
        val_dataset=DatasetRegistry.load_dataset(dataset, "test"),
    )
    try:
        trainer.fit()
    finally:
        trainer.shutdown()


@hydra.main(config_path="pkg://rllm.trainer.config", config_name="unified", version_base=None)
def main(config: DictConfig) -> None:
    train(config)


if __name__ == "__main__":
    main()
