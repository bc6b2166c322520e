"""rLLM's unified trainer on our rollouts, for the math agent (README "Training backends", rLLM).

rLLM's remote runtime path is its ``UnifiedTrainer`` (``rllm.trainer.AgentTrainer`` on the ``unified``
config); ``install()`` adds our backend to its factory before the trainer (and its Ray workers) start. The
rows are rLLM's ``gsm8k_agentcore`` dataset (its ``examples/agentcore_math/prepare_gsm8k_data.py``), whose
``{prompt, answer}`` tasks are the math agent's payload as they are. Run with ``rllm.sh`` beside this file.
"""

import hydra
from omegaconf import DictConfig

from trainer_client.backends.rllm import install


@hydra.main(config_path="pkg://rllm.trainer.config", config_name="unified", version_base=None)
def main(config: DictConfig) -> None:
    install()  # before rLLM (and Ray) load: here and in every Ray worker the trainer starts
    from rllm.data.dataset import DatasetRegistry
    from rllm.trainer import AgentTrainer

    AgentTrainer(
        config=config,
        train_dataset=DatasetRegistry.load_dataset("gsm8k_agentcore", "train"),
        val_dataset=DatasetRegistry.load_dataset("gsm8k_agentcore", "test"),
        backend="verl",
    ).train()


if __name__ == "__main__":
    main()
