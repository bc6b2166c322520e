"""A rollout's lifecycle: the one table of the moves between its sessions-table states.

Each :class:`Move` says which states a rollout may leave and which it enters, who makes the move, on what
condition, how the account's session-slot count changes and which result is stored with it. The ledger
(``rollout_budgets.ledger``) builds every write's DynamoDB condition and state change from its row, so a rollout
moves only as :data:`MOVES` lists; ``docs/architecture.md`` shows :func:`markdown_table` (a test checks it).

A move's ``guard`` is a DynamoDB condition over the item besides its state: ``#name`` stands for the
attribute ``name`` of ``sessions``, ``:value`` for a value the caller gives. A cancel is not a move: it
marks the item (``ATTR_CANCEL_REQUESTED_AT``) before it stores the ``cancelled`` result, whatever the state.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from rollout_contract.sessions import (
    ATTR_ATTEMPTS,
    ATTR_CANCEL_REQUESTED_AT,
    ATTR_INFLIGHT,
    ATTR_LEASE_OWNER,
    ATTR_LEASE_UNTIL,
    ATTR_STATE,
    SessionState,
)


class Mover(StrEnum):
    """The functions that move a rollout between states, and the trainer's sandbox client (its own sandboxes)."""

    DISPATCHER = "dispatcher"
    FINISHER = "finisher"
    SWEEPER = "sweeper"
    SANDBOX_CLIENT = "sandbox client"


#: The states in which a rollout holds a session slot (its item carries ``ATTR_INFLIGHT``).
HOLDING_SLOT = frozenset({SessionState.ADMITTED, SessionState.RUNNING})


@dataclass(frozen=True)
class Move:
    """One row of the lifecycle table."""

    #: The move's name (the ledger's method that makes it, or a suffix saying which of its writes).
    name: str
    #: States the rollout may be in; ``None``: no start recorded it (no item, or only a cancel's mark).
    sources: tuple[SessionState | None, ...]
    target: SessionState
    movers: tuple[Mover, ...]
    #: When the move is made, in words.
    when: str
    #: The condition besides the state, as DynamoDB condition text (``""``: none).
    guard: str
    #: +1: takes a session slot, -1: frees it, 0: leaves it.
    slot: int
    #: The result stored with the move (``""``: none).
    result: str
    #: When the rollout's session is stopped, relative to the move (``""``: not by this move).
    stop: str = ""

    @property
    def condition(self) -> str:
        """The whole DynamoDB condition of the move: its sources, that it holds the slot it frees, its guard."""
        states = [f":{state}" for state in self.sources if state is not None]
        alternatives = [f"attribute_not_exists(#{ATTR_STATE})"] if None in self.sources else []
        if len(states) == 1:
            alternatives.append(f"#{ATTR_STATE} = {states[0]}")
        elif states:
            alternatives.append(f"#{ATTR_STATE} IN ({', '.join(states)})")
        clauses = [" OR ".join(alternatives)]
        if self.slot < 0:
            clauses.append(f"attribute_exists(#{ATTR_INFLIGHT})")
        if self.guard:
            clauses.append(self.guard)
        if len(clauses) > 1 and len(alternatives) > 1:
            clauses[0] = f"({clauses[0]})"
        return " AND ".join(clauses)


_NO_CANCEL = f"attribute_not_exists(#{ATTR_CANCEL_REQUESTED_AT})"
_LEASED_TO_CALLER = f"#{ATTR_LEASE_OWNER} = :owner"

RECORD_QUEUED = Move(
    "record_queued",
    (None,),
    SessionState.QUEUED,
    (Mover.DISPATCHER,),
    "a start found no slot in its wait, or a redelivery found no item",
    "",
    0,
    "",
)
START = Move(
    "start",
    (None,),
    SessionState.ADMITTED,
    (Mover.DISPATCHER, Mover.SANDBOX_CLIENT),
    "a first receive, no cancel came first, a slot is free (attempt 1); a sandbox's start",
    _NO_CANCEL,
    +1,
    "",
)
ADMIT = Move(
    "admit",
    (SessionState.QUEUED,),
    SessionState.ADMITTED,
    (Mover.DISPATCHER,),
    "a slot is free and the attempts are as read (one more counted)",
    f"#{ATTR_ATTEMPTS} = :seen",
    +1,
    "",
)
TAKE_OVER = Move(
    "take_over",
    (SessionState.ADMITTED,),
    SessionState.ADMITTED,
    (Mover.DISPATCHER,),
    "the admitting dispatcher's lease ran out (one more attempt counted)",
    f"#{ATTR_LEASE_UNTIL} < :now AND #{ATTR_LEASE_OWNER} = :previous",
    0,
    "",
)
MARK_RUNNING = Move(
    "mark_running",
    (SessionState.ADMITTED,),
    SessionState.RUNNING,
    (Mover.DISPATCHER, Mover.SANDBOX_CLIENT),
    "the invoke was accepted and the caller still holds the lease; the timeout runs from the invoke (a sandbox's "
    "from its start); the endpoint invoked is recorded (`#endpoint`): every later call for the session goes there",
    _LEASED_TO_CALLER,
    0,
    "",
)
RELEASE_TO_QUEUED = Move(
    "release_to_queued",
    (SessionState.ADMITTED,),
    SessionState.QUEUED,
    (Mover.DISPATCHER,),
    "no invoke token, or a retryable invoke error; the caller still holds the lease",
    _LEASED_TO_CALLER,
    -1,
    "",
)
FINISH = Move(
    "finish",
    (SessionState.ADMITTED, SessionState.RUNNING),
    SessionState.FINISHED,
    (Mover.FINISHER, Mover.SWEEPER, Mover.SANDBOX_CLIENT),
    "its result is stored (finisher: the result's event; sweeper: past the deadline); a sandbox's session is "
    "stopped (its terminate, or the sweeper past its deadline)",
    "",
    -1,
    "the agent's; `timed_out` (sweeper); `cancelled`; `dispatch_failed` (a failed invoke); none for a sandbox",
    "after the move when the agent stored its result (`succeeded`, `agent_error`), in an invoke token reserved "
    "before it (a stop that fails is retried with the result's event; the slot stays free); before it when the "
    "agent may still run (`timed_out`, `cancelled`, a sandbox); none after `dispatch_failed`",
)
EXPIRE = Move(
    "expire",
    (SessionState.RUNNING,),
    SessionState.RUNNING,
    (Mover.SANDBOX_CLIENT,),
    "a sandbox's terminate could not stop its session: its deadline becomes now, so the next sweep stops it",
    "",
    0,
    "",
)
FINISH_UNSTARTED = Move(
    "finish_unstarted",
    (None, SessionState.QUEUED),
    SessionState.FINISHED,
    (Mover.FINISHER, Mover.SWEEPER),
    "its result is stored before it holds a slot",
    "",
    0,
    "`cancelled`; `dispatch_failed` (unusable, out of attempts, past its start limit)",
    "before the move, for `cancelled` (a start may have raced the cancel)",
)

#: The lifecycle table: every move a rollout's item makes.
MOVES: tuple[Move, ...] = (
    RECORD_QUEUED,
    START,
    ADMIT,
    TAKE_OVER,
    MARK_RUNNING,
    RELEASE_TO_QUEUED,
    FINISH,
    FINISH_UNSTARTED,
    EXPIRE,
)


def allowed(source: SessionState | None, target: SessionState) -> bool:
    """Whether some move of the table takes a rollout from ``source`` to ``target``."""
    return any(source in move.sources and move.target is target for move in MOVES)


def markdown_table() -> str:
    """The lifecycle table as docs/architecture.md shows it."""
    lines = [
        "| move | from | to | by | when | condition | slot | result stored | session stopped |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for move in MOVES:
        sources = ", ".join("(none)" if state is None else f"`{state}`" for state in move.sources)
        slot = {1: "+1 (takes)", -1: "-1 (frees)", 0: "0"}[move.slot]
        lines.append(
            f"| `{move.name}` | {sources} | `{move.target}` | {', '.join(move.movers)} | {move.when} "
            f"| `{move.condition}` | {slot} | {move.result or 'none'} | {move.stop or 'no'} |"
        )
    return "\n".join(lines) + "\n"
