"""The lifecycle table: what docs/architecture.md shows is the table the ledger builds its conditions from."""

from __future__ import annotations

from pathlib import Path

from rollout_contract.lifecycle import FINISH, FINISH_UNSTARTED, HOLDING_SLOT, MOVES, START, allowed, markdown_table
from rollout_contract.sessions import SessionState

ARCHITECTURE = Path(__file__).parents[2] / "docs" / "architecture.md"


def test_the_architecture_doc_shows_the_table_as_the_code_defines_it() -> None:
    # GIVEN the table in the code / WHEN it is rendered / THEN the doc holds exactly that rendering
    assert markdown_table() in ARCHITECTURE.read_text(encoding="utf-8")


def test_a_rollout_takes_a_slot_only_into_and_frees_it_only_out_of_the_holding_states() -> None:
    # GIVEN every move of the table
    for move in MOVES:
        held_before = {state in HOLDING_SLOT for state in move.sources}
        # THEN it leaves states that all hold a slot or none does, and its slot change is the difference
        assert len(held_before) == 1, move.name
        assert move.slot == int(move.target in HOLDING_SLOT) - int(held_before.pop()), move.name


def test_finished_is_final_and_every_state_can_end() -> None:
    # GIVEN / WHEN / THEN no move leaves finished, and a rollout ends from any state it can be in
    assert all(SessionState.FINISHED not in move.sources for move in MOVES)
    for state in (None, SessionState.QUEUED, SessionState.ADMITTED, SessionState.RUNNING):
        assert allowed(state, SessionState.FINISHED), state
    assert not allowed(SessionState.RUNNING, SessionState.QUEUED)


def test_conditions_name_the_states_a_move_leaves() -> None:
    # GIVEN / WHEN / THEN each condition is built from its row (sources, the slot it frees, its guard)
    assert START.condition == "attribute_not_exists(#state) AND attribute_not_exists(#cancel_requested_at)"
    assert FINISH.condition == "#state IN (:admitted, :running) AND attribute_exists(#inflight)"
    assert FINISH_UNSTARTED.condition == "attribute_not_exists(#state) OR #state = :queued"
