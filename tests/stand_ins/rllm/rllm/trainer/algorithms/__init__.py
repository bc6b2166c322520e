"""Stand-in of ``rllm.trainer.algorithms``: the advantage estimators' config and GRPO's advantages.

Rewritten from rLLM 9beb6e0f (``config.py``, ``advantage.py``, ``rl_algo.py``): a group's advantage is
``(r - mean) / (std + 1e-6)`` with ``norm_adv_by_std_in_grpo``, else ``r - mean`` (mean 0, std 1 for a group of
one), broadcast to every step of the trajectory; metrics ``reward/<role>/mean|std`` and
``advantage/<role>/mean|std``. Only ``grpo`` is rewritten; the other estimators raise ``NotImplementedError``.
"""

import contextlib
import time
from dataclasses import dataclass
from enum import StrEnum

import numpy as np


class rLLMAdvantageEstimator(StrEnum):  # noqa: N801 - rLLM's name
    GRPO = "grpo"
    REINFORCE = "reinforce"
    REINFORCE_PLUS_PLUS_BASELINE = "reinforce_plus_plus_baseline"
    RLOO = "rloo"
    OTHER = "other"


@dataclass
class AlgorithmConfig:
    estimator: rLLMAdvantageEstimator = rLLMAdvantageEstimator.GRPO
    norm_adv_by_std_in_grpo: bool = True
    loss_fn: str | None = None
    lr_schedule: str = "constant"
    warmup_steps: int = -1
    warmup_steps_ratio: float = 0.0
    router_replay: str = "disabled"

    @classmethod
    def from_config(cls, config, **kwargs):
        return cls(
            estimator=rLLMAdvantageEstimator(config.get("adv_estimator", "grpo")),
            norm_adv_by_std_in_grpo=config.get("norm_adv_by_std_in_grpo", True),
            loss_fn=config.get("loss_fn"),
            lr_schedule=config.get("lr_schedule", "constant"),
            warmup_steps=config.get("warmup_steps", -1),
            warmup_steps_ratio=config.get("warmup_steps_ratio", 0.0),
            router_replay=config.get("router_replay", "disabled"),
        )


def calculate_grpo_advantages_per_group(rewards, norm_adv_by_std_in_grpo=True, episilon=1e-6):
    mean, std = (0.0, 1.0) if len(rewards) <= 1 else (np.mean(rewards), np.std(rewards))
    return (rewards - mean) / (std + episilon) if norm_adv_by_std_in_grpo else rewards - mean


def collect_reward_and_advantage_from_trajectory_groups(groups, algorithm_config):
    if algorithm_config.estimator != rLLMAdvantageEstimator.GRPO:
        raise NotImplementedError(f"the stand-in computes grpo advantages only, not {algorithm_config.estimator}")
    rewards_by_role, advantages_by_role = {}, {}
    for group in groups:
        rewards = np.array([trajectory.reward or 0.0 for trajectory in group.trajectories], dtype=float)
        advantages = calculate_grpo_advantages_per_group(rewards, algorithm_config.norm_adv_by_std_in_grpo)
        for trajectory, advantage in zip(group.trajectories, advantages, strict=True):
            for step in trajectory.steps:
                step.advantage = float(advantage)
        rewards_by_role.setdefault(group.group_role, []).extend(rewards.tolist())
        advantages_by_role.setdefault(group.group_role, []).extend(advantages.tolist())
    metrics = {}
    for role, rewards in rewards_by_role.items():
        metrics[f"reward/{role}/mean"] = float(np.mean(rewards))
        metrics[f"reward/{role}/std"] = float(np.std(rewards))
        metrics[f"advantage/{role}/mean"] = float(np.mean(advantages_by_role[role]))
        metrics[f"advantage/{role}/std"] = float(np.std(advantages_by_role[role]))
    return metrics


@contextlib.contextmanager
def simple_timer(name, timing_dict):
    started = time.perf_counter()
    yield
    timing_dict[name] = time.perf_counter() - started
