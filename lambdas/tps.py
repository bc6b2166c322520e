"""The invoke budget of one runtime endpoint, shared by every dispatcher, finisher and sweeper.

Reserved slots instead of per-second counters: one DynamoDB item holds ``next_at``, the start time of
the next free slot. Taking a token is one atomic update that hands out the slot and moves ``next_at``
one interval on; the caller sleeps until its slot starts. Slots are spaced ``1 / rate`` apart with
``rate = floor(limit) * TPS_HEADROOM``, so any 1-second window holds at most ``floor(limit)`` starts and
a slot may start up to :attr:`TpsBudget.max_lateness_s` late without breaking that (a later slot is
given back and replaced). Calendar-second counters would admit twice the limit across a boundary.

A token costs one conditional update when the budget is as the caller last saw it: busy (take the slot at
``next_at``) or idle (``next_at`` in the past: start at "now"). A failed update returns the item it met, so
guessing wrong costs one more update and never a read.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from lambdas.exceptions import NoTokenError
from rollout_contract.budgets import ATTR_NEXT_AT, tps_budget_id
from rollout_contract.resources import BUDGET_PARTITION_KEY, TTL_ATTRIBUTE

if TYPE_CHECKING:
    from botocore.client import BaseClient

#: Fraction of the limit the slots are spaced for; the rest absorbs jitter between reserving and sending.
TPS_HEADROOM = 0.97
#: How far ahead of "now" a slot starts at the earliest: time for the caller's own writes before it sends.
LEAD_S = 0.1
#: How long a budget item outlives its last use (TTL), in seconds.
ITEM_TTL_S = 24 * 3600
_CONDITION_FAILED = "ConditionalCheckFailedException"
_MAX_ROUNDS = 8


class TpsBudget:
    """Invoke slots of one runtime endpoint (ARN + qualifier), at most ``limit`` per sliding second."""

    def __init__(
        self,
        dynamodb: BaseClient,
        *,
        table: str,
        runtime_arn: str,
        qualifier: str,
        limit: float,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        lead_s: float = LEAD_S,
    ) -> None:
        if limit <= 0:
            raise ValueError(f"TPS limit must be positive, got {limit}")
        self._dynamodb = dynamodb
        self._table = table
        self._key = {BUDGET_PARTITION_KEY: {"S": tps_budget_id(runtime_arn, qualifier)}}
        self._clock = clock
        self._sleep = sleep
        self.lead_s = lead_s
        whole = math.floor(limit) if limit >= 1 else limit
        self.interval_s = 1.0 / (whole * TPS_HEADROOM)
        self.max_lateness_s = (1.0 / TPS_HEADROOM - 1.0) / 2 if limit >= 1 else self.interval_s / 2
        #: ``next_at`` as the last update saw it (``-inf``: unset); ``None`` before the first update.
        self._seen_next_at: float | None = None
        #: Held by the one thread of this process that waits for a slot; the others queue behind it, so a
        #: batch's threads do not all wake at the same moment and each spend an update on the same slot.
        self._waiting = threading.Lock()

    def reserve(self, *, horizon_s: float) -> float:
        """Reserve the next free slot if it starts within ``horizon_s`` seconds; return its start time.

        Raises:
            NoTokenError: every slot up to the horizon is taken (``retry_after_s`` says for how long).
        """
        for _ in range(_MAX_ROUNDS):
            now = self._clock()
            earliest = now + self.lead_s
            horizon = max(now + horizon_s, earliest)
            seen = self._seen_next_at
            # Idle when last seen: try the slot at "now" first (a busy budget goes straight to ``next_at``).
            if seen is not None and seen < earliest and self._take_idle_slot(earliest):
                return earliest
            start, next_at = self._take_queued_slot(earliest, horizon)
            if start is not None:
                return start
            if next_at > horizon:
                raise NoTokenError(retry_after_s=next_at - horizon)
            if next_at < earliest and self._take_idle_slot(earliest):
                return earliest
        raise NoTokenError(retry_after_s=self.interval_s)

    def reserve_waiting(self, *, horizon_s: float, wait_s: float) -> float:
        """Like :meth:`reserve`, but while every slot up to the horizon is taken, sleep until one is in reach.

        Each reservation still starts at most ``horizon_s`` ahead of its own "now", so callers with a longer
        horizon keep their precedence; waiting here instead of going back to the queue keeps the budget full
        under a backlog (a requeue costs at least a second of SQS visibility and several writes).

        Raises:
            NoTokenError: no slot came within reach in ``wait_s`` seconds.
        """
        give_up_at = self._clock() + wait_s
        try:
            return self.reserve(horizon_s=horizon_s)
        except NoTokenError as exc:
            if self._clock() + exc.retry_after_s > give_up_at:
                raise
        if not self._waiting.acquire(timeout=max(0.0, give_up_at - self._clock())):
            raise NoTokenError(retry_after_s=self.interval_s)
        try:
            while True:
                try:
                    return self.reserve(horizon_s=horizon_s)
                except NoTokenError as exc:
                    if self._clock() + exc.retry_after_s > give_up_at:
                        raise
                    self._sleep(exc.retry_after_s)
        finally:
            self._waiting.release()

    def wait_for(self, slot_start: float, *, max_wait_s: float, wait_s: float = 0.0) -> float:
        """Sleep until a reserved slot starts and return the send time.

        A slot missed by more than :attr:`max_lateness_s` (a stalled caller) is given up for a new one,
        so a late send never crowds the window of a later slot; the new one is reserved as
        :meth:`reserve_waiting` does (``wait_s``: how long it may wait for a slot within ``max_wait_s``).

        Raises:
            NoTokenError: a new slot was needed and none came within reach in time.
        """
        start = slot_start
        while True:
            delay = start - self._clock()
            if delay > 0:
                self._sleep(delay)
            now = self._clock()
            if now - start <= self.max_lateness_s:
                return now
            start = self.reserve_waiting(horizon_s=max_wait_s, wait_s=wait_s)

    def acquire(self, *, max_wait_s: float) -> float:
        """Wait for a slot starting within ``max_wait_s`` seconds; return the send time.

        Raises:
            NoTokenError: no slot starts within ``max_wait_s``.
        """
        return self.wait_for(self.reserve(horizon_s=max_wait_s), max_wait_s=max_wait_s)

    def _take_queued_slot(self, earliest: float, horizon: float) -> tuple[float | None, float]:
        """Take the slot at ``next_at`` when it lies in ``[earliest, horizon]``.

        Returns:
            The slot's start (``None`` when not taken) and ``next_at`` as the update saw it (``-inf``: unset).
        """
        try:
            response = self._dynamodb.update_item(
                TableName=self._table,
                Key=self._key,
                UpdateExpression="SET #next = #next + :step, #ttl = :ttl",
                ConditionExpression="#next BETWEEN :earliest AND :horizon",
                ExpressionAttributeNames={"#next": ATTR_NEXT_AT, "#ttl": TTL_ATTRIBUTE},
                ExpressionAttributeValues={
                    ":step": _number(self.interval_s),
                    ":earliest": _number(earliest),
                    ":horizon": _number(horizon),
                    ":ttl": _number(int(earliest) + ITEM_TTL_S),
                },
                ReturnValues="UPDATED_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != _CONDITION_FAILED:
                raise
            next_at = self._remember(exc.response.get("Item"))
            return None, next_at
        next_at = self._remember(response["Attributes"])
        return next_at - self.interval_s, next_at

    def _take_idle_slot(self, earliest: float) -> bool:
        """Take the slot starting at ``earliest`` when the budget is idle (``next_at`` before it, or unset)."""
        try:
            self._dynamodb.update_item(
                TableName=self._table,
                Key=self._key,
                UpdateExpression="SET #next = :next, #ttl = :ttl",
                ConditionExpression="attribute_not_exists(#next) OR #next < :earliest",
                ExpressionAttributeNames={"#next": ATTR_NEXT_AT, "#ttl": TTL_ATTRIBUTE},
                ExpressionAttributeValues={
                    ":next": _number(earliest + self.interval_s),
                    ":earliest": _number(earliest),
                    ":ttl": _number(int(earliest) + ITEM_TTL_S),
                },
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != _CONDITION_FAILED:
                raise
            self._remember(exc.response.get("Item"))
            return False
        self._seen_next_at = earliest + self.interval_s
        return True

    def _remember(self, item: dict[str, dict[str, str]] | None) -> float:
        """Keep and return the ``next_at`` of an item an update returned (``-inf`` when it had none)."""
        next_at = float(item[ATTR_NEXT_AT]["N"]) if item and ATTR_NEXT_AT in item else -math.inf
        self._seen_next_at = next_at
        return next_at


def _number(value: float) -> dict[str, str]:
    return {"N": repr(float(value)) if isinstance(value, float) else str(value)}
