"""``rollouts sessions`` and ``rollouts cancel``: the rollouts in flight, and stopping some or all of them.

Both read the sessions table through :meth:`RolloutClient.sessions` / :meth:`RolloutClient.session` and cancel
through :meth:`RolloutClient.cancel` (a ``CancelRequest`` per rollout on the dispatch queue, as
``future.cancel()`` sends it).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TextIO

from rollout_contract import ResultKey, Status
from rollout_contract.sandbox import is_sandbox_session
from rollout_contract.sessions import SessionRecord, SessionState
from trainer_client._client import RolloutClient
from trainer_client._results import ClientResult
from trainer_client._words import plural

__all__ = ["cancel_rollouts", "duration", "print_sessions", "session_row", "utc"]

#: Cancelled session ids printed by ``cancel`` (the rest are counted).
_SHOWN = 10


def utc(unix_s: float) -> str:
    """``2026-11-26 23:45:10 UTC``."""
    return f"{datetime.fromtimestamp(unix_s, UTC):%Y-%m-%d %H:%M:%S} UTC"


def duration(seconds: float) -> str:
    """``45s``, ``3m05s``, ``2h07m``: short enough for a column."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def session_row(record: SessionRecord, now: float) -> dict[str, object]:
    """One rollout as ``--json`` prints it (times in unix seconds, ages and remaining time in seconds)."""
    return {
        "session_id": record.session_id,
        "kind": "sandbox" if is_sandbox_session(record.session_id) else "rollout",
        "input_id": record.input_id,
        "exp_id": record.exp_id,
        "state": record.state.value,
        "submitted_at": record.submitted_at,
        "dispatched_at": record.dispatched_at,
        "deadline_at": record.deadline_at,
        "age_s": None if record.submitted_at is None else round(now - record.submitted_at, 1),
        "deadline_in_s": None if record.deadline_at is None else round(record.deadline_at - now, 1),
        "attempts": record.attempts,
    }


def print_sessions(
    records: Sequence[SessionRecord],
    *,
    as_json: bool,
    out: TextIO,
    now: float | None = None,
    ended: Sequence[tuple[SessionRecord, ClientResult]] = (),
) -> None:
    """A heading with the counts by state and the time, then one line per rollout (or JSON lines).

    Sandboxes (``trainer_client.sandbox``) hold slots of the same budget: they follow under a heading of their own.
    ``ended``: rollouts the sessions table still lists whose result is stored; they are not shown as in flight,
    a line says how many (``--json``: one object each, ``state`` ``ended`` and its ``status``).
    """
    now = time.time() if now is None else now
    if as_json:
        for record in records:
            print(json.dumps(session_row(record, now)), file=out)
        for record, result in ended:
            print(json.dumps({**session_row(record, now), "state": "ended", "status": result.status.value}), file=out)
        return
    sandboxes = [record for record in records if is_sandbox_session(record.session_id)]
    rollouts = [record for record in records if not is_sandbox_session(record.session_id)]
    _print_table("rollout", rollouts, now, out)
    if sandboxes:
        _print_table("sandbox", sandboxes, now, out)
    if ended:
        print(
            f"{_ended_phrase(ended)}: the sessions table had not marked "
            f"{'it' if len(ended) == 1 else 'them'} finished yet; not shown",
            file=out,
        )


def _ended_phrase(ended: Sequence[tuple[SessionRecord, ClientResult]]) -> str:
    """``2 rollouts listed in flight already ended with a stored result (1 agent_error, 1 succeeded)``."""
    statuses = Counter(result.status.value for _, result in ended)
    how = ", ".join(f"{count} {status}" for status, count in sorted(statuses.items()))
    return f"{plural(len(ended), 'rollout')} listed in flight already ended with a stored result ({how})"


def _print_table(what: str, records: Sequence[SessionRecord], now: float, out: TextIO) -> None:
    states = Counter(record.state.value for record in records)
    counts = ", ".join(f"{count} {state}" for state, count in sorted(states.items())) or "none"
    print(
        f"{plural(len(records), what, what + 'es' if what.endswith('x') else None)} in flight ({counts}) at {utc(now)}",
        file=out,
    )
    if not records:
        return
    print(f"{'SESSION':<38} {'INPUT':<24} {'STATE':<9} {'AGE':>7}  DEADLINE", file=out)
    for record in records:
        age = "-" if record.submitted_at is None else duration(now - record.submitted_at)
        deadline = "-"
        if record.deadline_at is not None:
            left = record.deadline_at - now
            when = f"in {duration(left)}" if left >= 0 else f"{duration(-left)} ago"
            deadline = f"{when} ({utc(record.deadline_at)})"
        line = f"{record.session_id:<38} {record.input_id or '-':<24} {record.state.value:<9} {age:>7}  {deadline}"
        print(line, file=out)


def cancel_rollouts(
    client: RolloutClient,
    *,
    session_ids: Sequence[str] = (),
    input_id: str | None = None,
    everything: bool = False,
    out: TextIO,
    wait_s: float = 5.0,
) -> int:
    """Cancel the named sessions, an input id's rollouts, or every rollout not ended; return the exit status.

    Checks each rollout against the stored results first (the sessions table learns of an end late): one already
    ended is reported with how it ended, not sent a cancel. Then waits up to ``wait_s`` for the cancelled ones'
    results and says how each ended (``cancelled``, or what it ended as before the cancel reached it).

    Exit status 0 when every rollout chosen has ended or been asked to (none in flight is nothing to do, not an
    error); 1 when a ``--session`` names no rollout of the experiment (unknown, or a sandbox).
    """
    records: list[SessionRecord] = []
    unknown = 0
    for session_id in session_ids:
        record = client.session(session_id)
        if record is None or record.input_id is None:
            print(f"no rollout {session_id} recorded in {client.exp_id}'s sessions table (a typo, or not yet "
                  "received by a dispatcher: try again in a moment)", file=out)  # fmt: skip
            unknown += 1
        elif is_sandbox_session(session_id):
            print(f"{session_id} is a sandbox, not a rollout: its trainer terminates it, or the sweeper stops it at "
                  "its deadline", file=out)  # fmt: skip
            unknown += 1
        else:
            records.append(record)
    if input_id is not None or everything:
        view = client.in_flight(queued=True)
        listed = [*view.in_flight, *(record for record, _ in view.ended)]
        records += [
            record
            for record in listed
            if record.input_id is not None
            and not is_sandbox_session(record.session_id)  # sandboxes end by terminate() or at their deadline
            and (everything or record.input_id == input_id)
        ]
    view = client.check_ended(records)
    named = set(session_ids)
    for record, result in view.ended:
        if record.session_id in named:
            print(f"rollout {record.session_id} already ended ({result.status.value}): nothing to cancel", file=out)
    unnamed = [(record, result) for record, result in view.ended if record.session_id not in named]
    if unnamed:  # the sessions table still listed them (it learns of an end late): one line, not one each
        print(f"{_ended_phrase(unnamed)}: nothing to cancel", file=out)
    # A finished item without a stored result is a sandbox's or one whose result was deleted: nothing to cancel.
    live = [record for record in view.in_flight if record.state is not SessionState.FINISHED]
    if not live:
        which = f" of input id {input_id}" if input_id is not None else ""
        print(f"nothing to cancel: no rollout{which} in flight", file=out)
        return 1 if unknown else 0
    sent = client.cancel(ResultKey(record.exp_id or client.exp_id, str(record.input_id), record.session_id)
                         for record in live)  # fmt: skip
    shown = ", ".join(record.session_id for record in live[:_SHOWN])
    more = f" and {len(live) - _SHOWN} more" if len(live) > _SHOWN else ""
    print(f"cancel requested for {plural(sent, 'rollout')}: {shown}{more}", file=out)
    started = time.monotonic()
    settled = client.check_ended(live)
    while settled.in_flight and time.monotonic() - started < wait_s:
        time.sleep(0.5)
        settled = client.check_ended(live)
    statuses = Counter(result.status.value for _, result in settled.ended)
    cancelled = statuses.pop(Status.CANCELLED.value, 0)
    line = f"after {time.monotonic() - started:.1f} s: {cancelled} cancelled"
    if statuses:
        line += ", ended first: " + ", ".join(f"{count} {status}" for status, count in sorted(statuses.items()))
    if settled.in_flight:
        line += (
            f"; {len(settled.in_flight)} not ended yet (each ends as cancelled unless it ends first; its session is "
            "stopped; `rollouts sessions` shows them)"
        )
    print(line, file=out)
    return 1 if unknown else 0
