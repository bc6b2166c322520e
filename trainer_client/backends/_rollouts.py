"""What the rLLM and ART adapters share: group ids a framework hands us, and waiting on one future."""

from __future__ import annotations

import hashlib
import time

from rollout_contract import InvalidIdError, validate_input_id
from trainer_client._future import RolloutFuture
from trainer_client._results import ClientResult

__all__ = ["group_input_id", "wait_for_result"]


def group_input_id(group: object) -> str:
    """Our ``input_id`` for a framework's group key: the key itself if it is key-safe, else a stable digest.

    Frameworks name groups freely (``"gsm8k:17"``, a dataset index); result keys allow only letters,
    digits, ``.``, ``_``, ``~`` and ``-``. The digest keeps equal keys in one group.
    """
    text = str(group)
    try:
        return validate_input_id(text)
    except InvalidIdError:
        return "g-" + hashlib.sha256(text.encode()).hexdigest()[:40]


async def wait_for_result(future: RolloutFuture, grace_s: float) -> ClientResult | None:
    """Await ``future``'s result; ``None`` if none came ``grace_s`` after its deadline (not even the sweeper's).

    The rollout's deadline is server-side: at it the sweeper writes ``timed_out``, so a result normally
    arrives. The grace only bounds the wait if that machinery is gone.
    """
    timeout = None if future.deadline_at is None else max(future.deadline_at - time.time(), 0.0) + grace_s
    try:
        return await future.result_async(timeout=timeout)
    except TimeoutError:
        return None
