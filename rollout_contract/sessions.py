"""The sessions table: one item per rollout, written by the dispatcher, finisher and sweeper.

Attribute names and states are defined here, and :class:`SessionRecord` reads an item, so the Lambdas, the
trainer's ``status``, ``sessions`` and ``cancel`` and the local stack read the same item the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from rollout_contract.resources import SESSIONS_PARTITION_KEY

if TYPE_CHECKING:
    from types_boto3_dynamodb.type_defs import AttributeValueTypeDef


class SessionState(StrEnum):
    """Where a rollout is in its life, as the sessions table records it."""

    QUEUED = "queued"  # recorded, waiting in the dispatch queue for a slot, a token or a retry; holds no slot
    ADMITTED = "admitted"  # recorded and holding a session slot; the invoke may not have happened yet
    RUNNING = "running"  # InvokeAgentRuntime accepted it
    FINISHED = "finished"  # a terminal result exists; the slot is released


# Attribute names of a sessions-table item (partition key: resources.SESSIONS_PARTITION_KEY).
ATTR_SESSION_ID = "session_id"
ATTR_EXP_ID = "exp_id"  # the rollout's exp_id: ``experiment`` or ``experiment/run``
ATTR_INPUT_ID = "input_id"
ATTR_STATE = "state"
ATTR_STATUS = "status"  # the terminal results.Status once finished
ATTR_SUBMITTED_AT = "submitted_at"
ATTR_DISPATCHED_AT = "dispatched_at"
ATTR_FINISHED_AT = "finished_at"
ATTR_DEADLINE_AT = "deadline_at"
ATTR_ENDPOINT = "endpoint"  # the qualifier of the runtime endpoint that was invoked: every later call goes there
ATTR_INFLIGHT = "inflight"  # present (value INFLIGHT_MARK) only while the rollout holds a slot
ATTR_ATTEMPTS = "attempts"
INFLIGHT_MARK = "1"
# The dispatcher that admitted a rollout owns it until ``lease_until`` (unix s); a redelivered copy of the
# message takes it over only after that, so two copies in flight at once never both invoke.
ATTR_LEASE_OWNER = "lease_owner"
ATTR_LEASE_UNTIL = "lease_until"
# Set (unix s) by a cancel request before it writes the ``cancelled`` result. A cancel that arrives before
# the start message leaves an item without ``state`` (no rollout recorded yet): the start then knows that a
# result may exist, and a start that records a brand-new item knows that none does.
ATTR_CANCEL_REQUESTED_AT = "cancel_requested_at"

# The trainer (``RolloutClient``) a rollout belongs to: its result event is for that trainer's poller. Written
# once, when the rollout is recorded (from ``DispatchRequest.trainer``); ``attach`` moves it to the resuming one.
ATTR_TRAINER = "trainer"
# A trainer's lease lives in the same table, under its own key: a trainer is alive while ``alive_until`` (unix s)
# is ahead. Session ids hold no '#', so the key never names a rollout.
TRAINER_ITEM_PREFIX = "trainer#"
ATTR_ALIVE_UNTIL = "alive_until"


def trainer_item_key(trainer_id: str) -> str:
    """The sessions-table key of trainer ``trainer_id``'s lease item."""
    return f"{TRAINER_ITEM_PREFIX}{trainer_id}"


@dataclass(frozen=True)
class SessionRecord:
    """One rollout's sessions-table item (times are unix seconds)."""

    session_id: str
    state: SessionState
    exp_id: str | None = None
    input_id: str | None = None
    status: str | None = None
    submitted_at: float | None = None
    dispatched_at: float | None = None
    deadline_at: float | None = None
    attempts: int = 0
    inflight: bool = False
    lease_owner: str | None = None
    lease_until: float | None = None
    #: The endpoint (qualifier) the session was invoked on; ``None`` before its invoke is recorded.
    endpoint: str | None = None

    @classmethod
    def from_item(cls, item: Mapping[str, AttributeValueTypeDef]) -> SessionRecord:
        """Read a DynamoDB item in its wire shape."""

        def text(name: str) -> str | None:
            return item[name]["S"] if name in item else None

        def number(name: str) -> float | None:
            return float(item[name]["N"]) if name in item else None

        return cls(
            session_id=item[SESSIONS_PARTITION_KEY]["S"],
            state=SessionState(item[ATTR_STATE]["S"]),
            exp_id=text(ATTR_EXP_ID),
            input_id=text(ATTR_INPUT_ID),
            status=text(ATTR_STATUS),
            submitted_at=number(ATTR_SUBMITTED_AT),
            dispatched_at=number(ATTR_DISPATCHED_AT),
            deadline_at=number(ATTR_DEADLINE_AT),
            attempts=int(number(ATTR_ATTEMPTS) or 0),
            inflight=ATTR_INFLIGHT in item,
            lease_owner=text(ATTR_LEASE_OWNER),
            lease_until=number(ATTR_LEASE_UNTIL),
            endpoint=text(ATTR_ENDPOINT),
        )
