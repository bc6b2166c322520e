"""GRPO groups: ``n`` samples per prompt under one ``input_id``, yielded once the group is complete.

Advantages are group-normalized: ``(r - mean) / (std + eps)``, with the population std of the group's
rewards. A member *failed* if its status is not ``succeeded`` or it has no reward; what happens to a
group with failed members is the :class:`FailurePolicy`.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum

from trainer_client._batch import BatchItem
from trainer_client._results import ClientResult

__all__ = ["FailurePolicy", "GroupCollector", "RolloutGroup", "group_advantages", "iter_groups", "iter_groups_async"]

logger = logging.getLogger("trainer_client")


class FailurePolicy(StrEnum):
    """What to do with a group that has failed members.

    - ``DROP_GROUP``: skip the whole group (the default; its advantages would be biased).
    - ``DROP_FAILED``: keep the successful members and normalize over them; skip the group if none is left.
    - ``ZERO_REWARD``: keep every member, failed ones with reward 0.0 (they have no token data to train
      on, but they pull the group's mean down).
    """

    DROP_GROUP = "drop_group"
    DROP_FAILED = "drop_failed"
    ZERO_REWARD = "zero_reward"


@dataclass(frozen=True, slots=True)
class RolloutGroup:
    """The finished samples of one prompt.

    Attributes:
        input_id: the group id.
        items: the members kept, in completion order (failed ones only under ``ZERO_REWARD``).
        rewards: their rewards (0.0 for failed members under ``ZERO_REWARD``).
        advantages: their group-normalized advantages.
        failed: the members that failed (kept or not, depending on the policy).
    """

    input_id: str
    items: list[BatchItem]
    rewards: list[float]
    advantages: list[float]
    failed: list[BatchItem]

    @property
    def results(self) -> list[ClientResult | None]:
        """The results of the members kept."""
        return [item.result for item in self.items]


def group_advantages(rewards: list[float], eps: float = 1e-6) -> list[float]:
    """Return ``(r - mean) / (std + eps)`` for each reward (population std; all zero for one member)."""
    if not rewards:
        return []
    mean = statistics.fmean(rewards)
    std = statistics.pstdev(rewards, mean)
    return [(reward - mean) / (std + eps) for reward in rewards]


def _is_failed(item: BatchItem) -> bool:
    return not item.success or item.result is None or item.result.reward is None


def _reward(item: BatchItem) -> float:
    """The reward of an item that is not :func:`_is_failed`."""
    reward = item.result.reward if item.result is not None else None
    if reward is None:
        raise ValueError(f"rollout {item.session_id} has no reward")
    return reward


class GroupCollector:
    """Collect batch items by ``input_id``; :meth:`add` returns each group when its last member arrives.

    For callers that iterate a batch themselves (e.g. to show every rollout as it finishes) and still
    want GRPO groups; :meth:`RolloutClient.run_groups` uses it.
    """

    def __init__(self, size: int, policy: FailurePolicy, eps: float) -> None:
        self._size = size
        self._policy = FailurePolicy(policy)
        self._eps = eps
        self._open: dict[str, list[BatchItem]] = {}

    def add(self, item: BatchItem) -> RolloutGroup | None:
        """Add one finished member; return its group if now complete and kept by the policy, else ``None``."""
        members = self._open.setdefault(item.input_id or item.session_id, [])
        members.append(item)
        if len(members) < self._size:
            return None
        input_id = item.input_id or item.session_id
        del self._open[input_id]
        return self._build(input_id, members)

    def _build(self, input_id: str, members: list[BatchItem]) -> RolloutGroup | None:
        failed = [item for item in members if _is_failed(item)]
        if self._policy is FailurePolicy.ZERO_REWARD:
            kept = members
            rewards = [0.0 if _is_failed(item) else _reward(item) for item in members]
        else:
            kept = [item for item in members if not _is_failed(item)]
            rewards = [_reward(item) for item in kept]
            if not kept or (failed and self._policy is FailurePolicy.DROP_GROUP):
                logger.info("group %s dropped: %d of %d members failed", input_id, len(failed), len(members))
                return None
        return RolloutGroup(input_id, kept, rewards, group_advantages(rewards, self._eps), failed)


def iter_groups(items: Iterable[BatchItem], size: int, policy: FailurePolicy, eps: float) -> Iterator[RolloutGroup]:
    """Group a batch's items; yield each group the policy keeps."""
    grouper = GroupCollector(size, policy, eps)
    for item in items:
        if (group := grouper.add(item)) is not None:
            yield group


async def iter_groups_async(
    items: AsyncIterator[BatchItem], size: int, policy: FailurePolicy, eps: float
) -> AsyncIterator[RolloutGroup]:
    """:func:`iter_groups` over an async iterator of items."""
    grouper = GroupCollector(size, policy, eps)
    async for item in items:
        if (group := grouper.add(item)) is not None:
            yield group
