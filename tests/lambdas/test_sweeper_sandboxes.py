"""The sweeper and sandbox sessions: a sandbox past its deadline is stopped and its slot freed, with no result.

The sandbox is recorded as the trainer's sandbox client records it (``trainer_client.sandbox._budget``): the same
ledger calls on the same tables.
"""

from __future__ import annotations

import time

from lambdas import sweeper
from lambdas.sweeper import sweep
from rollout_budgets.ledger import Admission
from rollout_contract.results import Status
from rollout_contract.sandbox import new_sandbox_session_id
from rollout_contract.sessions import SessionState
from tests.lambdas.conftest import EXP_ID, STOP, Env
from tests.lambdas.test_finisher import emf_blobs
from tests.lambdas.test_sweeper import later
from trainer_client.sandbox._budget import SandboxStart


def running_sandbox(env: Env, *, lifetime_s: float) -> SandboxStart:
    """A sandbox admitted and started now, as the trainer's client does it, with ``lifetime_s`` to live."""
    now = time.time()
    start = SandboxStart(EXP_ID, "task-1", new_sandbox_session_id(), "trainer-1", now, now + 3600 + lifetime_s)
    started = env.rt.ledger.start(
        start.key,
        submitted_at=now,
        deadline_at=start.deadline_at,
        trainer="trainer-1",
        owner="trainer-1",
        lease_until=start.deadline_at,
    )
    assert started.admission is Admission.ADMITTED
    assert env.rt.ledger.mark_running(
        start.session_id, owner="trainer-1", dispatched_at=now, deadline_at=now + lifetime_s, endpoint="DEFAULT"
    )
    return start


def test_an_overdue_sandbox_is_stopped_and_its_slot_freed_with_no_result_written(env: Env, capsys) -> None:
    # GIVEN a sandbox holding a slot, whose trainer never terminated it, past its deadline
    sandbox = running_sandbox(env, lifetime_s=-1)
    assert env.rt.ledger.slots_held() == (1, 1)
    capsys.readouterr()

    # WHEN the scheduled sweeper runs
    summary = sweeper.handler({"source": "aws.events"}, None)

    # THEN its session is stopped, it is finished timed_out and its slot freed, and no result object exists
    assert (summary["overdue"], summary["finished"]) == (1, 1)
    assert [call.session_id for call in env.acr.calls_of(STOP)] == [sandbox.session_id]
    record = env.rt.ledger.get(sandbox.session_id)
    assert (record.state, record.status) == (SessionState.FINISHED, Status.TIMED_OUT.value)
    assert env.rt.ledger.slots_held() == (0, 0)
    assert not env.rt.store.exists(sandbox.key)
    # AND it is counted as a sandbox that expired
    (blob,) = [b for b in emf_blobs(capsys.readouterr().out) if "SandboxesExpired" in b]
    assert blob["SandboxesExpired"] == [1.0]


def test_a_sandbox_before_its_deadline_is_left_alone(env: Env) -> None:
    sandbox = running_sandbox(env, lifetime_s=600)
    assert sweep(env.rt).overdue == 0
    assert env.rt.ledger.get(sandbox.session_id).state is SessionState.RUNNING
    assert env.acr.calls_of(STOP) == []


def test_a_sandbox_whose_stop_failed_is_expired_and_the_next_sweep_stops_it(env: Env) -> None:
    # GIVEN a sandbox with an hour left, whose trainer could not stop it and moved its deadline to now
    sandbox = running_sandbox(env, lifetime_s=3600)
    assert env.rt.ledger.expire(sandbox.session_id, now=time.time())

    # WHEN the sweeper runs a moment later
    report = sweep(later(env, 1))

    # THEN it stops the sandbox and frees its slot
    assert report.finished == 1
    assert [call.session_id for call in env.acr.calls_of(STOP)] == [sandbox.session_id]
    assert env.rt.ledger.slots_held() == (0, 0)
    # AND a finished sandbox cannot be expired again
    assert not env.rt.ledger.expire(sandbox.session_id, now=time.time())
