"""Who a result event is for: each rollout records its trainer, each trainer keeps a lease (D55).

Every ``RolloutClient`` has a trainer id. Its dispatch requests carry it, and the dispatcher records it on the
rollout's sessions item when it records the rollout (no extra call). While the client has rollouts pending,
it keeps a lease item ``trainer#<id>`` alive in the sessions table (renewed every ``lease_s / 4``, released on
``close``). A poller that receives an event for a rollout it does not own asks whose it is: the rollout's
recorded trainer (GetItem, cached) and that trainer's lease (cached a few seconds). A live trainer gets the
event back (visibility 0); an event no live trainer will claim (its trainer died or closed, its rollout was
never recorded by our dispatcher, e.g. an ART client's) is deleted: its result stays in S3, where ``attach``
reads it. ``attach`` claims its rollouts (the trainer moves to the attaching client) before it reads what is
stored, so an event either reaches the new owner or its result is read.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from enum import Enum
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from rollout_contract.resources import SESSIONS_PARTITION_KEY, TTL_ATTRIBUTE
from rollout_contract.retry import TRANSACTION_CONFLICTS, transaction_conflict
from rollout_contract.sessions import ATTR_ALIVE_UNTIL, ATTR_TRAINER, trainer_item_key

if TYPE_CHECKING:
    from types_boto3_dynamodb import DynamoDBClient
    from types_boto3_dynamodb.type_defs import AttributeValueTypeDef, TransactWriteItemTypeDef

__all__ = ["Claim", "Ownership"]

logger = logging.getLogger("trainer_client")

#: How long a lease item and a claimed stub outlive their last write (TTL), seconds.
_ITEM_TTL_S = 7 * 24 * 3600
#: TransactWriteItems takes at most 100 actions.
_CLAIM_CHUNK = 100
#: Rollouts whose recorded trainer is remembered (the trainer of a rollout changes only on ``attach``).
_REMEMBER_OWNERS = 1 << 16


class Claim(Enum):
    """Whose a received event is."""

    MINE = "mine"  # recorded for this client (a future it no longer remembers): delete
    LIVE = "live"  # another trainer's, alive: hand back
    ORPHAN = "orphan"  # no live trainer will claim it: delete (the result stays in S3)
    UNKNOWN = "unknown"  # could not be read: hand back


class Ownership:
    """This client's lease, its claims on attached rollouts, and whose a received event is.

    Args:
        dynamodb: a boto3 DynamoDB client.
        table: the experiment's sessions table.
        trainer_id: this client's id.
        lease_s: how long a renewed lease lasts.
        lease_cache_s: how long another trainer's lease, once read, is believed.
        clock: Unix time.
    """

    def __init__(
        self,
        dynamodb: DynamoDBClient,
        table: str,
        *,
        trainer_id: str,
        lease_s: float,
        lease_cache_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._dynamodb = dynamodb
        self._table = table
        self.trainer_id = trainer_id
        self._lease_s = lease_s
        self._lease_cache_s = lease_cache_s
        self._clock = clock
        self._lock = threading.Lock()
        self._alive_until = 0.0
        self._owners: OrderedDict[str, str | None] = OrderedDict()
        self._leases: dict[str, tuple[float, float]] = {}

    def keep_alive(self) -> None:
        """Renew this client's lease when a quarter of it has passed (one UpdateItem; nothing otherwise)."""
        now = self._clock()
        with self._lock:
            if self._alive_until - now > self._lease_s * 3 / 4:
                return
            self._alive_until = now + self._lease_s
            until = self._alive_until
        self._write_lease(until, now)

    def release(self) -> None:
        """End this client's lease at once: other trainers may delete its rollouts' events from now on."""
        with self._lock:
            if not self._alive_until:
                return
            self._alive_until = 0.0
        try:
            self._write_lease(0.0, self._clock())
        except (BotoCoreError, ClientError) as exc:
            logger.warning("could not release the trainer lease (%s); it lapses within %.0f s", exc, self._lease_s)

    def _write_lease(self, until: float, now: float) -> None:
        self._dynamodb.update_item(
            TableName=self._table,
            Key={SESSIONS_PARTITION_KEY: {"S": trainer_item_key(self.trainer_id)}},
            UpdateExpression="SET #alive = :until, #ttl = :ttl",
            ExpressionAttributeNames={"#alive": ATTR_ALIVE_UNTIL, "#ttl": TTL_ATTRIBUTE},
            ExpressionAttributeValues={":until": _n(until), ":ttl": _n(int(now) + _ITEM_TTL_S)},
        )

    def claim(self, session_ids: Iterable[str]) -> None:
        """Record this client as the trainer of ``session_ids`` (100 per transaction), before reading their results.

        A rollout not recorded yet gets a stub item holding only its trainer; the dispatcher keeps it.

        Raises:
            botocore.exceptions.ClientError: a transaction failed for good.
        """
        self.keep_alive()
        ids = list(dict.fromkeys(session_ids))
        ttl = _n(int(self._clock()) + _ITEM_TTL_S)
        for start in range(0, len(ids), _CLAIM_CHUNK):
            chunk = ids[start : start + _CLAIM_CHUNK]
            self._transact(
                [
                    {
                        "Update": {
                            "TableName": self._table,
                            "Key": {SESSIONS_PARTITION_KEY: {"S": session_id}},
                            "UpdateExpression": "SET #trainer = :me, #ttl = if_not_exists(#ttl, :ttl)",
                            "ExpressionAttributeNames": {"#trainer": ATTR_TRAINER, "#ttl": TTL_ATTRIBUTE},
                            "ExpressionAttributeValues": {":me": {"S": self.trainer_id}, ":ttl": ttl},
                        }
                    }
                    for session_id in chunk
                ]
            )
            with self._lock:
                for session_id in chunk:
                    self._owners.pop(session_id, None)

    def _transact(self, items: list[TransactWriteItemTypeDef]) -> None:
        TRANSACTION_CONFLICTS.call(
            lambda: self._dynamodb.transact_write_items(TransactItems=items), retry_on=transaction_conflict
        )

    def whose(self, session_id: str) -> Claim:
        """Whose the event of rollout ``session_id`` is (this client does not hold a future for it)."""
        try:
            trainer = self._owner(session_id, fresh=False)
            if trainer is not None and trainer != self.trainer_id and not self._alive(trainer):
                # A dead trainer's rollout may have been claimed by an attach since it was cached.
                trainer = self._owner(session_id, fresh=True)
        except (BotoCoreError, ClientError) as exc:
            logger.debug("completion poller: could not read the trainer of %s (%s)", session_id, exc)
            return Claim.UNKNOWN
        if trainer is None:
            return Claim.ORPHAN
        if trainer == self.trainer_id:
            return Claim.MINE
        return Claim.LIVE if self._alive(trainer) else Claim.ORPHAN

    def _owner(self, session_id: str, *, fresh: bool) -> str | None:
        with self._lock:
            if not fresh and session_id in self._owners:
                self._owners.move_to_end(session_id)
                return self._owners[session_id]
        item = self._get(session_id, ATTR_TRAINER)
        trainer = item[ATTR_TRAINER]["S"] if item and ATTR_TRAINER in item else None
        with self._lock:
            self._owners[session_id] = trainer
            if len(self._owners) > _REMEMBER_OWNERS:
                self._owners.popitem(last=False)
        return trainer

    def _alive(self, trainer: str) -> bool:
        now = self._clock()
        with self._lock:
            cached = self._leases.get(trainer)
        if cached is None or now - cached[1] > self._lease_cache_s:
            item = self._get(trainer_item_key(trainer), ATTR_ALIVE_UNTIL)
            until = float(item[ATTR_ALIVE_UNTIL]["N"]) if item and ATTR_ALIVE_UNTIL in item else 0.0
            cached = (until, now)
            with self._lock:
                self._leases[trainer] = cached
        return cached[0] > now

    def _get(self, key: str, attribute: str) -> dict[str, Any] | None:
        item: dict[str, Any] | None = self._dynamodb.get_item(
            TableName=self._table,
            Key={SESSIONS_PARTITION_KEY: {"S": key}},
            ConsistentRead=True,
            ProjectionExpression="#a",
            ExpressionAttributeNames={"#a": attribute},
        ).get("Item")
        return item


def _n(value: float) -> AttributeValueTypeDef:
    return {"N": repr(value) if isinstance(value, float) else str(value)}
