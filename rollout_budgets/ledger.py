"""The sessions table and the account's session-slot count, changed together or not at all.

Every write that moves a rollout between states is one row of the lifecycle table
(``rollout_contract.lifecycle``): its condition, its new state and its slot mark are built from that row.
A rollout holds a slot exactly while its item carries ``inflight``. Every change that adds or removes
``inflight`` is one DynamoDB transaction with the matching change to the slot count in the budget table
(``total`` and the experiment's ``held#<exp_id>``), conditioned on the item's state, so a slot is taken
once and freed once whoever (dispatcher, finisher, sweeper) gets there first. :meth:`Ledger.reconcile`
sets the experiment's count from the inflight index, which repairs manual drift, and drops the counts of
experiments whose sweeper stopped running (a destroyed stack).

Writes return what they found (``ReturnValues`` / ``ReturnValuesOnConditionCheckFailure``, also inside
transactions) instead of being followed by a read: the item a write met is as consistent as a strongly
consistent read. A first start is one transaction (:meth:`Ledger.start`: record, admit, count the attempt
and take the slot) and a finish another, so a rollout's happy path costs three writes (start, running,
finish) besides the invoke budget's tokens.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, NamedTuple

from botocore.exceptions import ClientError

from rollout_budgets.conditional import conditional_write, n, s
from rollout_contract.aws import error_reasons
from rollout_contract.budgets import (
    ATTR_TOTAL,
    HELD_PREFIX,
    SESSION_BUDGET_ID,
    held_attribute,
    seen_attribute,
)
from rollout_contract.lifecycle import (
    ADMIT,
    EXPIRE,
    FINISH,
    FINISH_UNSTARTED,
    MARK_RUNNING,
    RECORD_QUEUED,
    RELEASE_TO_QUEUED,
    START,
    TAKE_OVER,
    Move,
)
from rollout_contract.naming import PROJECT
from rollout_contract.resources import BUDGET_PARTITION_KEY, INFLIGHT_INDEX, SESSIONS_PARTITION_KEY, TTL_ATTRIBUTE
from rollout_contract.results import Status
from rollout_contract.retry import TRANSACTION_CONFLICTS, transaction_conflict
from rollout_contract.sessions import (
    ATTR_ATTEMPTS,
    ATTR_CANCEL_REQUESTED_AT,
    ATTR_DEADLINE_AT,
    ATTR_DISPATCHED_AT,
    ATTR_ENDPOINT,
    ATTR_EXP_ID,
    ATTR_FINISHED_AT,
    ATTR_INFLIGHT,
    ATTR_INPUT_ID,
    ATTR_LEASE_OWNER,
    ATTR_LEASE_UNTIL,
    ATTR_STATE,
    ATTR_STATUS,
    ATTR_SUBMITTED_AT,
    ATTR_TRAINER,
    INFLIGHT_MARK,
    SessionRecord,
    SessionState,
)

if TYPE_CHECKING:
    from types_boto3_dynamodb import DynamoDBClient

    from rollout_contract.keys import ResultKey

# A child of the functions' Powertools logger (service PROJECT): its lines are the functions' JSON lines, and the
# module needs no Powertools, so a trainer's sandbox client takes its session slots through this same code.
logger = logging.getLogger(f"{PROJECT}.ledger")

#: How long a sessions-table item outlives its deadline or its end (TTL), in seconds.
RECORD_TTL_S = 7 * 24 * 3600
#: An experiment whose sweeper has not run for this long is gone; its slot count is dropped.
STALE_EXPERIMENT_S = 15 * 60
_REASON_CONDITION = "ConditionalCheckFailed"
_FINISH_ROUNDS = 4


#: Inside a transaction: a failed condition returns the item it met (in ``CancellationReasons``).
_RETURN_OLD_ON_FAILURE = {"ReturnValuesOnConditionCheckFailure": "ALL_OLD"}


class _Cancelled(NamedTuple):
    """Why a transaction was cancelled: each item's reason code, and the item a failed condition met."""

    reasons: list[str]
    items: list[Mapping[str, Any] | None]


class Admission(StrEnum):
    """Outcome of asking for a session slot."""

    ADMITTED = "admitted"
    NO_SLOT = "no_slot"
    STATE_CHANGED = "state_changed"


class Transition(StrEnum):
    """Outcome of :meth:`Ledger.finish`."""

    RELEASED = "released"  # this call finished the rollout and freed its slot
    FINISHED = "finished"  # this call finished a rollout that held no slot
    ALREADY_FINISHED = "already_finished"  # someone else finished it first


class Recorded(NamedTuple):
    """A rollout's item as :meth:`Ledger.record_queued` left it."""

    record: SessionRecord
    #: This call created the item: neither a start nor a cancel of the rollout came before it.
    new: bool


class Started(NamedTuple):
    """What :meth:`Ledger.start` did."""

    #: ``ADMITTED``: the item was created admitted, holding a slot; ``NO_SLOT``: nothing was written (the
    #: count is full); ``STATE_CHANGED``: an item was there already and nothing was written.
    admission: Admission
    #: The item that was there (``STATE_CHANGED``), ``None`` when it held a cancel's mark alone.
    found: SessionRecord | None = None


@dataclass(frozen=True)
class Reconciliation:
    """What :meth:`Ledger.reconcile` saw and did."""

    inflight: int
    held_before: int
    applied: bool
    dropped_experiments: tuple[str, ...] = ()


class Ledger:
    """One experiment's sessions table plus its share of the account-wide session-slot count."""

    def __init__(
        self,
        dynamodb: DynamoDBClient,
        *,
        sessions_table: str,
        budget_table: str,
        exp_id: str,
        session_budget: int,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._dynamodb = dynamodb
        self._sleep = sleep
        self._sessions = sessions_table
        self._budgets = budget_table
        self._exp_id = exp_id
        self._session_budget = session_budget
        self._held = held_attribute(exp_id)

    def get(self, session_id: str) -> SessionRecord | None:
        """Read a rollout's item (strongly consistent), or ``None`` when no start recorded it."""
        item = self._dynamodb.get_item(TableName=self._sessions, Key=_key(session_id), ConsistentRead=True).get("Item")
        return _record_or_none(item)

    def record_queued(
        self, key: ResultKey, *, submitted_at: float, deadline_at: float, trainer: str | None = None
    ) -> Recorded:
        """Record a rollout as ``queued`` unless a start recorded it before; return its item either way.

        ``deadline_at`` is the latest deadline (start limit + timeout) until :meth:`mark_running` sets the real
        one. One conditional write: its item on success is the one written, on failure the one that was there.
        """
        update = self._create(RECORD_QUEUED, key, submitted_at, deadline_at, trainer, attempts=0)
        written = conditional_write(
            self._dynamodb.update_item, **update, ReturnValues="ALL_OLD", ReturnValuesOnConditionCheckFailure="ALL_OLD"
        )
        if not written.ok:
            return Recorded(SessionRecord.from_item(written.response["Item"]), new=False)
        record = SessionRecord(
            session_id=key.session_id,
            state=SessionState.QUEUED,
            exp_id=key.exp_id,
            input_id=key.input_id,
            submitted_at=submitted_at,
            deadline_at=deadline_at,
        )
        return Recorded(record, new="Attributes" not in written.response)

    def start(
        self,
        key: ResultKey,
        *,
        submitted_at: float,
        deadline_at: float,
        trainer: str | None = None,
        owner: str,
        lease_until: float,
    ) -> Started:
        """Record a rollout no start or cancel has seen as ``admitted`` (attempt 1) and take its slot, at once.

        One transaction: the first receive of a start message needs no ``queued`` write and no separate
        admission. The item is created only if there was none (not even a cancel's mark), so a rollout
        this call admits has no result yet. Nothing is written when the slot count is full or an item exists.
        """
        update = self._create(
            START, key, submitted_at, deadline_at, trainer, attempts=1, owner=owner, lease_until=lease_until
        )
        failed = self._transact({"Update": {**update, **_RETURN_OLD_ON_FAILURE}}, self._take_slot())
        if failed is None:
            return Started(Admission.ADMITTED)
        if failed.reasons[0] == _REASON_CONDITION:
            return Started(Admission.STATE_CHANGED, _record_or_none(failed.items[0]))
        return Started(Admission.NO_SLOT)

    def mark_cancel_requested(
        self, session_id: str, *, requested_at: float, trainer: str | None = None
    ) -> SessionRecord | None:
        """Note a cancel on the rollout's item (creating it if need be, owned by ``trainer``); return the item as
        it was.

        Called before the ``cancelled`` result is written, so a start that finds no item at all knows that
        no result exists (see ``sessions.ATTR_CANCEL_REQUESTED_AT``).
        """
        names = {"#cancel": ATTR_CANCEL_REQUESTED_AT, "#ttl": TTL_ATTRIBUTE}
        values = {":at": n(requested_at), ":ttl": n(int(requested_at) + RECORD_TTL_S)}
        expression = "SET #cancel = if_not_exists(#cancel, :at), #ttl = if_not_exists(#ttl, :ttl)"
        if trainer is not None:
            names["#trainer"], values[":trainer"] = ATTR_TRAINER, s(trainer)
            expression += ", #trainer = if_not_exists(#trainer, :trainer)"
        response = self._dynamodb.update_item(
            TableName=self._sessions,
            Key=_key(session_id),
            UpdateExpression=expression,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
            ReturnValues="ALL_OLD",
        )
        return _record_or_none(response.get("Attributes"))

    def admit(self, session_id: str, *, attempts_seen: int, owner: str, lease_until: float) -> Admission:
        """Take a session slot for a ``queued`` rollout, lease it to ``owner`` and count the attempt.

        ``attempts_seen`` is the attempt count as last read; it must be unchanged (else ``STATE_CHANGED``), so
        the count :meth:`mark_running`'s caller works with (``attempts_seen + 1``) is exact.
        """
        update = self._move(
            ADMIT,
            session_id,
            {ATTR_LEASE_OWNER: ":owner", ATTR_LEASE_UNTIL: ":lease", ATTR_ATTEMPTS: ":attempts"},
            {
                ":owner": s(owner),
                ":lease": n(lease_until),
                ":seen": n(attempts_seen),
                ":attempts": n(attempts_seen + 1),
            },
        )
        failed = self._transact({"Update": update}, self._take_slot())
        if failed is None:
            return Admission.ADMITTED
        if failed.reasons[0] == _REASON_CONDITION:
            return Admission.STATE_CHANGED
        return Admission.NO_SLOT

    def take_over(
        self, session_id: str, *, owner: str, previous_owner: str | None, now: float, lease_until: float
    ) -> int | None:
        """Take over an ``admitted`` rollout whose lease expired (its dispatcher died); keeps its slot.

        Returns the attempts so far, this one counted, or ``None`` when the rollout was not there to take.
        """
        update = self._move(
            TAKE_OVER,
            session_id,
            {ATTR_LEASE_OWNER: ":owner", ATTR_LEASE_UNTIL: ":lease", ATTR_ATTEMPTS: f"#{ATTR_ATTEMPTS} + :one"},
            {
                ":owner": s(owner),
                ":previous": s(previous_owner or ""),
                ":lease": n(lease_until),
                ":now": n(now),
                ":one": n(1),
            },
        )
        written = conditional_write(self._dynamodb.update_item, **update, ReturnValues="UPDATED_NEW")
        return int(written.response["Attributes"][ATTR_ATTEMPTS]["N"]) if written.ok else None

    def mark_running(
        self, session_id: str, *, owner: str, dispatched_at: float, deadline_at: float, endpoint: str
    ) -> bool:
        """Record that the invoke sent at ``dispatched_at`` to ``endpoint`` (a qualifier) succeeded; the rollout's
        timeout runs from there, and every later call for its session goes to that endpoint.

        Until then its deadline is the latest one (start limit + timeout), so a dispatcher that dies between
        the invoke and this write leaves a rollout the sweeper still ends. ``False`` when the rollout ended
        meanwhile (cancel, deadline) or another dispatcher took it over.
        """
        update = self._move(
            MARK_RUNNING,
            session_id,
            {ATTR_DISPATCHED_AT: ":at", ATTR_DEADLINE_AT: ":deadline", ATTR_ENDPOINT: ":endpoint"},
            {":owner": s(owner), ":at": n(dispatched_at), ":deadline": n(deadline_at), ":endpoint": s(endpoint)},
            remove=(ATTR_LEASE_OWNER, ATTR_LEASE_UNTIL),
        )
        return conditional_write(self._dynamodb.update_item, **update).ok

    def release_to_queued(self, session_id: str, *, owner: str, deadline_at: float, attempted: bool) -> bool:
        """Put an ``admitted`` rollout back to ``queued`` and free its slot; ``False`` if ``owner`` lost it.

        ``deadline_at`` is the deadline of a rollout that has not started: the latest one (start limit +
        timeout). ``attempted``: the invoke was sent (and failed); otherwise the attempt counted at
        admission is given back (no invoke slot came), so waiting for the budget never uses up attempts.
        """
        update = self._move(
            RELEASE_TO_QUEUED,
            session_id,
            {ATTR_DEADLINE_AT: ":deadline", ATTR_ATTEMPTS: f"#{ATTR_ATTEMPTS} - :refund"},
            {":deadline": n(deadline_at), ":owner": s(owner), ":refund": n(0 if attempted else 1)},
            remove=(ATTR_LEASE_OWNER, ATTR_LEASE_UNTIL),
        )
        failed = self._transact({"Update": update}, self._free_slot())
        if failed is None:
            return True
        if failed.reasons[0] == _REASON_CONDITION:
            return False
        self._warn_count_at_zero(session_id)
        return conditional_write(self._dynamodb.update_item, **update).ok

    def expire(self, session_id: str, *, now: float) -> bool:
        """Move a running sandbox's deadline to ``now``, so the next sweep stops it; ``False`` if not running."""
        update = self._move(EXPIRE, session_id, {ATTR_DEADLINE_AT: ":now"}, {":now": n(now)})
        return conditional_write(self._dynamodb.update_item, **update).ok

    def finish(self, key: ResultKey, *, status: Status, finished_at: float, holding: bool = True) -> Transition:
        """Mark a rollout finished with ``status`` and free its slot if it holds one (exactly once).

        Args:
            key: the rollout's result key.
            status: its terminal status.
            finished_at: when it ended (unix s).
            holding: whether it is believed to hold a slot; only decides which move is tried first.
        """
        assignments = {
            ATTR_STATUS: ":status",
            ATTR_FINISHED_AT: ":at",
            ATTR_EXP_ID: ":exp",
            ATTR_INPUT_ID: ":input",
            TTL_ATTRIBUTE: ":ttl",
        }
        values = {
            ":status": s(status),
            ":at": n(finished_at),
            ":exp": s(key.exp_id),
            ":input": s(key.input_id),
            ":ttl": n(int(finished_at) + RECORD_TTL_S),
        }
        lease = (ATTR_LEASE_OWNER, ATTR_LEASE_UNTIL)
        holding_update = self._move(FINISH, key.session_id, assignments, values, remove=lease)
        unstarted_update = self._move(FINISH_UNSTARTED, key.session_id, assignments, values, remove=lease)
        try_holding = holding
        for _ in range(_FINISH_ROUNDS):
            if try_holding:
                failed = self._transact({"Update": {**holding_update, **_RETURN_OLD_ON_FAILURE}}, self._free_slot())
                if failed is None:
                    return Transition.RELEASED
                if failed.reasons[0] != _REASON_CONDITION:
                    self._warn_count_at_zero(key.session_id)
                    if conditional_write(self._dynamodb.update_item, **holding_update).ok:
                        return Transition.RELEASED
                    continue
                if _is_finished(failed.items[0]):
                    return Transition.ALREADY_FINISHED
            written = conditional_write(
                self._dynamodb.update_item, **unstarted_update, ReturnValuesOnConditionCheckFailure="ALL_OLD"
            )
            if written.ok:
                return Transition.FINISHED
            if _is_finished(written.response.get("Item")):
                return Transition.ALREADY_FINISHED
            try_holding = True
        raise RuntimeError(f"session {key.session_id} kept changing while being finished; retry the event")

    def overdue(self, now: float) -> Iterator[SessionRecord]:
        """Yield the rollouts holding a slot whose deadline is before ``now``, earliest first."""
        yield from self._query_inflight(
            KeyConditionExpression="#inflight = :mark AND #deadline < :now",
            ExpressionAttributeNames={"#inflight": INFLIGHT_INDEX.partition_key, "#deadline": INFLIGHT_INDEX.sort_key},
            ExpressionAttributeValues={":mark": s(INFLIGHT_MARK), ":now": n(now)},
        )

    def count_inflight(self) -> int:
        """Count this experiment's rollouts that hold a slot (from the inflight index)."""
        pages = self._dynamodb.get_paginator("query").paginate(
            TableName=self._sessions,
            IndexName=INFLIGHT_INDEX.name,
            KeyConditionExpression="#inflight = :mark",
            ExpressionAttributeNames={"#inflight": INFLIGHT_INDEX.partition_key},
            ExpressionAttributeValues={":mark": s(INFLIGHT_MARK)},
            Select="COUNT",
        )
        return sum(page["Count"] for page in pages)

    def free_slots(self) -> int:
        """Session slots free in the account now: one strongly consistent read of the count."""
        return max(0, self._session_budget - self.slots_held()[1])

    def slots_held(self) -> tuple[int, int]:
        """Return ``(held by this experiment, total held in the account)``."""
        item = self._budget_item()
        return _count(item, self._held), _count(item, ATTR_TOTAL)

    def reconcile(self, now: float) -> Reconciliation:
        """Set this experiment's slot count to its inflight items and drop experiments that are gone.

        The count is read before the index and written only if it did not change meanwhile (else the
        next sweep tries again), so concurrent takes and frees are never lost.
        """
        item = self._budget_item()
        inflight = self.count_inflight()
        held_before = _count(item, self._held)
        others: dict[str, int] = {}
        stale: list[str] = []
        for name, value in item.items():
            if not name.startswith(HELD_PREFIX) or name == self._held:
                continue
            exp_id = name[len(HELD_PREFIX) :]
            seen = item.get(seen_attribute(exp_id))
            if seen is not None and now - float(seen["N"]) > STALE_EXPERIMENT_S:
                stale.append(exp_id)
            else:
                others[exp_id] = int(value["N"])
        names = {"#total": ATTR_TOTAL, "#held": self._held, "#seen": seen_attribute(self._exp_id)}
        values = {
            ":total": n(inflight + sum(others.values())),
            ":held": n(inflight),
            ":now": n(now),
        }
        conditions = [
            _unchanged(item, "#total", ATTR_TOTAL, ":old_total", values),
            _unchanged(item, "#held", self._held, ":old_held", values),
        ]
        removals = []
        for index, exp_id in enumerate(stale):
            names[f"#stale_held{index}"] = held_attribute(exp_id)
            names[f"#stale_seen{index}"] = seen_attribute(exp_id)
            values[f":stale_seen{index}"] = item[seen_attribute(exp_id)]
            conditions.append(f"#stale_seen{index} = :stale_seen{index}")
            removals += [f"#stale_held{index}", f"#stale_seen{index}"]
        expression = "SET #total = :total, #held = :held, #seen = :now"
        if removals:
            expression += " REMOVE " + ", ".join(removals)
        applied = conditional_write(
            self._dynamodb.update_item,
            TableName=self._budgets,
            Key=_budget_key(),
            UpdateExpression=expression,
            ConditionExpression=" AND ".join(conditions),
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
        ).ok
        if applied and (inflight != held_before or stale):
            logger.warning(
                "session slot count reconciled",
                extra={"held_before": held_before, "inflight": inflight, "dropped_experiments": stale},
            )
        return Reconciliation(inflight, held_before, applied, tuple(stale) if applied else ())

    def _take_slot(self) -> dict[str, Any]:
        return {
            "Update": {
                "TableName": self._budgets,
                "Key": _budget_key(),
                "UpdateExpression": "SET #total = if_not_exists(#total, :zero) + :one, "
                "#held = if_not_exists(#held, :zero) + :one",
                "ConditionExpression": "attribute_not_exists(#total) OR #total < :budget",
                "ExpressionAttributeNames": {"#total": ATTR_TOTAL, "#held": self._held},
                "ExpressionAttributeValues": {":zero": n(0), ":one": n(1), ":budget": n(self._session_budget)},
            }
        }

    def _free_slot(self) -> dict[str, Any]:
        return {
            "Update": {
                "TableName": self._budgets,
                "Key": _budget_key(),
                "UpdateExpression": "SET #total = #total - :one, #held = #held - :one",
                "ConditionExpression": "#total > :zero AND #held > :zero",
                "ExpressionAttributeNames": {"#total": ATTR_TOTAL, "#held": self._held},
                "ExpressionAttributeValues": {":zero": n(0), ":one": n(1)},
            }
        }

    def _move(
        self,
        move: Move,
        session_id: str,
        assignments: Mapping[str, str],
        values: Mapping[str, Any],
        *,
        remove: tuple[str, ...] = (),
    ) -> dict[str, Any]:
        """The ``UpdateItem`` request of ``move``: its condition, its state and slot mark, then ``assignments``.

        ``assignments`` maps attributes to what they are set to (``#name`` is attribute ``name``, ``:value`` one
        of ``values``); ``remove`` lists attributes removed.
        """
        sets = {ATTR_STATE: f":{move.target}", **assignments}
        removes = list(remove)
        if move.slot > 0:
            sets[ATTR_INFLIGHT] = ":inflight_mark"
        elif move.slot < 0:
            removes.insert(0, ATTR_INFLIGHT)
        expression = "SET " + ", ".join(f"#{name} = {value}" for name, value in sets.items())
        if removes:
            expression += " REMOVE " + ", ".join(f"#{name}" for name in removes)
        text = f"{expression} {move.condition}"
        used = set(re.findall(r":\w+", text))
        states = {f":{state}": s(state) for state in SessionState if f":{state}" in used}
        marks = {":inflight_mark": s(INFLIGHT_MARK)} if ":inflight_mark" in used else {}
        return {
            "TableName": self._sessions,
            "Key": _key(session_id),
            "UpdateExpression": expression,
            "ConditionExpression": move.condition,
            "ExpressionAttributeNames": {f"#{name}": name for name in re.findall(r"#(\w+)", text)},
            "ExpressionAttributeValues": {**values, **states, **marks},
        }

    def _create(
        self,
        move: Move,
        key: ResultKey,
        submitted_at: float,
        deadline_at: float,
        trainer: str | None,
        *,
        attempts: int,
        owner: str | None = None,
        lease_until: float | None = None,
    ) -> dict[str, Any]:
        """The request of a move that records a rollout: its ids, times, trainer and first attempt count."""
        assignments = {
            ATTR_EXP_ID: ":exp",
            ATTR_INPUT_ID: ":input",
            ATTR_SUBMITTED_AT: ":submitted",
            ATTR_DEADLINE_AT: ":deadline",
            TTL_ATTRIBUTE: ":ttl",
            ATTR_ATTEMPTS: ":attempts",
        }
        values = {
            ":exp": s(key.exp_id),
            ":input": s(key.input_id),
            ":submitted": n(submitted_at),
            ":deadline": n(deadline_at),
            ":ttl": n(int(deadline_at) + RECORD_TTL_S),
            ":attempts": n(attempts),
        }
        if owner is not None and lease_until is not None:
            assignments |= {ATTR_LEASE_OWNER: ":owner", ATTR_LEASE_UNTIL: ":lease"}
            values |= {":owner": s(owner), ":lease": n(lease_until)}
        if trainer is not None:
            # A trainer that attached the rollout before it was recorded (a resend) keeps it.
            assignments[ATTR_TRAINER] = f"if_not_exists(#{ATTR_TRAINER}, :trainer)"
            values[":trainer"] = s(trainer)
        return self._move(move, key.session_id, assignments, values)

    def _budget_item(self) -> dict[str, Any]:
        return (
            self._dynamodb.get_item(TableName=self._budgets, Key=_budget_key(), ConsistentRead=True).get("Item") or {}
        )

    def _query_inflight(self, **query: Any) -> Iterator[SessionRecord]:
        pages = self._dynamodb.get_paginator("query").paginate(
            TableName=self._sessions, IndexName=INFLIGHT_INDEX.name, **query
        )
        for page in pages:
            for item in page["Items"]:
                yield SessionRecord.from_item(item)

    def _transact(self, *items: dict[str, Any]) -> _Cancelled | None:
        """Run a transaction; return ``None`` on success, else why each item was cancelled.

        A transaction cancelled only by conflicts with concurrent ones (the shared budget item) is retried
        (:data:`~rollout_contract.retry.TRANSACTION_CONFLICTS`).
        """
        try:
            TRANSACTION_CONFLICTS.call(
                # The items are requests built as dicts (see _move); botocore validates them against the model.
                lambda: self._dynamodb.transact_write_items(TransactItems=list(items)),  # type: ignore[arg-type]
                retry_on=transaction_conflict,
                sleep=self._sleep,
            )
            return None
        except ClientError as exc:
            reasons = error_reasons(exc)
            if _REASON_CONDITION not in reasons:
                raise
            return _Cancelled(reasons, [reason.get("Item") for reason in exc.response["CancellationReasons"]])

    def _warn_count_at_zero(self, session_id: str) -> None:
        logger.warning(
            "session slot count already at zero while freeing a slot; the sweeper's reconcile repairs it",
            extra={"session_id": session_id},
        )


def _record_or_none(item: Mapping[str, Any] | None) -> SessionRecord | None:
    """The record of an item a start recorded; ``None`` for no item or a cancel's mark alone."""
    return SessionRecord.from_item(item) if item and ATTR_STATE in item else None


def _is_finished(item: Mapping[str, Any] | None) -> bool:
    return item is not None and item.get(ATTR_STATE) == s(SessionState.FINISHED)


def _unchanged(item: Mapping[str, Any], placeholder: str, name: str, value_name: str, values: dict[str, Any]) -> str:
    if name not in item:
        return f"attribute_not_exists({placeholder})"
    values[value_name] = item[name]
    return f"{placeholder} = {value_name}"


def _count(item: Mapping[str, Any], name: str) -> int:
    return int(item[name]["N"]) if name in item else 0


def _key(session_id: str) -> dict[str, dict[str, str]]:
    return {SESSIONS_PARTITION_KEY: s(session_id)}


def _budget_key() -> dict[str, dict[str, str]]:
    return {BUDGET_PARTITION_KEY: s(SESSION_BUDGET_ID)}
