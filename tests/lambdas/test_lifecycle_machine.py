"""The functions driven at random against moto, every write checked against the lifecycle table.

Hypothesis' stateful testing interleaves dispatcher deliveries and redeliveries (first receives, later ones,
ones that wait for a slot), a dispatcher that dies after admitting, invoke errors, agents storing results,
finisher events (repeated), sweeper runs, cancels and the clock moving on. After every write to the
sessions table each rollout's state change must be a move of ``rollout_contract.lifecycle``; after every
step the slot count equals the rollouts holding a slot, no rollout was invoked twice and no stored result
changed; a session whose agent stored its result is stopped only once its rollout is finished (the table's
"session stopped" column: the slot is freed when the result is stored, before the stop), and a finish of such
a rollout whose stop fails still frees the slot;
at the end, once every message is handled and every deadline passed, each rollout is finished with exactly the
status of its one result and every session that was started has been stopped. The runtime has two endpoints:
every stop goes to the endpoint its session was invoked on, which its item records.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from lambdas.dispatcher import cancel, dispatch
from lambdas.exceptions import RequeueError
from lambdas.finishing import finish_rollout
from lambdas.runtime import Runtime
from lambdas.sweeper import sweep
from rollout_budgets.errors import AcrCallError, NoTokenError
from rollout_contract.lifecycle import HOLDING_SLOT, allowed
from rollout_contract.messages import DispatchRequest
from rollout_contract.protocol import DEFAULT_QUALIFIER, INTERNAL_SERVER, THROTTLING, VALIDATION
from rollout_contract.resources import SESSIONS_PARTITION_KEY
from rollout_contract.results import RolloutResult, Status, Timings
from rollout_contract.sessions import ATTR_INFLIGHT, ATTR_STATE, SessionState
from tests.lambdas.conftest import BUCKET, EXP_ID, INVOKE, STOP, Env, SteppedClock

#: Rollouts one run submits; the session budget (3) is smaller, so starts wait for slots.
ROLLOUTS = 5
#: Endpoints of the runtime (each its own invoke budget).
ENDPOINTS = 2
TIMEOUT_S = 30.0
QUEUE_TIMEOUT_S = 90.0
_WRITES = frozenset({"UpdateItem", "TransactWriteItems", "PutItem", "DeleteItem"})


@dataclasses.dataclass
class Rollout:
    request: DispatchRequest
    receives: int = 0
    #: The start message is in the queue (not yet handled, or handed back with a delay).
    queued_message: bool = True
    #: The stored result as first seen (status, ETag), ``None`` before one exists.
    result: tuple[Status, str] | None = None


class Observer:
    """Reads every rollout's item after each write to the sessions table and checks the move it made."""

    def __init__(self, env: Env, session_ids: list[str]) -> None:
        self._env = env
        self._session_ids = session_ids
        self._lock = threading.Lock()
        self.states: dict[str, SessionState | None] = dict.fromkeys(session_ids)
        self.violations: list[str] = []
        self.starts: dict[str, int] = dict.fromkeys(session_ids, 0)
        #: Stops ACR accepted, per session.
        self.stops: dict[str, int] = dict.fromkeys(session_ids, 0)
        #: Sessions whose agent stored the result (its work done: the slot is freed before the stop).
        self.agent_ended: set[str] = set()
        #: The endpoint (qualifier) each session's accepted invoke went to.
        self.endpoints: dict[str, str] = {}

    def after_write(self, model: Any, **_: Any) -> None:
        if model.name in _WRITES:
            self.check_moves()

    def check_moves(self) -> None:
        with self._lock:
            for session_id, item in self.items().items():
                state = SessionState(item[ATTR_STATE]["S"]) if ATTR_STATE in item else None
                before = self.states[session_id]
                if state != before and not (state is not None and allowed(before, state)):
                    self.violations.append(f"{session_id}: {before} -> {state} is not a move of the table")
                self.states[session_id] = state

    def items(self) -> dict[str, dict[str, Any]]:
        """Every rollout's item (``{}`` when it has none), in one strongly consistent batch read."""
        table = self._env.rt.settings.sessions_table
        keys = [{SESSIONS_PARTITION_KEY: {"S": session_id}} for session_id in self._session_ids]
        response = self._env.rt.clients.dynamodb.batch_get_item(
            RequestItems={table: {"Keys": keys, "ConsistentRead": True}}
        )
        found = {item[SESSIONS_PARTITION_KEY]["S"]: item for item in response["Responses"][table]}
        return {session_id: found.get(session_id, {}) for session_id in self._session_ids}


class Lifecycle(RuleBasedStateMachine):
    """One experiment with a session budget of 3 and ``ROLLOUTS`` rollouts submitted at once."""

    env: Env
    #: One clock for every run, so the invoke budget the runs share is never ahead of a run's time.
    clock: SteppedClock

    def __init__(self) -> None:
        super().__init__()
        # Two endpoints of the runtime, each with its own invoke budget: a session's stop must go to its own.
        settings = self.env.rt.settings.model_copy(update={"runtime_endpoints": ENDPOINTS})
        self.rt = Runtime.build(settings, self.env.rt.clients, clock=self.clock, sleep=self.clock.sleep)
        self.rollouts = [
            Rollout(
                self.env.start_request(
                    submitted_at=self.clock.now,
                    timeout_s=TIMEOUT_S,
                    queue_timeout_s=QUEUE_TIMEOUT_S,
                )
            )
            for _ in range(ROLLOUTS)
        ]
        ids = [rollout.request.session_id for rollout in self.rollouts]
        self.observer = Observer(self.env, ids)
        self._hooks = self._watch_writes()
        self._count_invokes()

    def _watch_writes(self) -> list[tuple[str, Any]]:
        """Check the moves after every write, one call at a time.

        moto checks a condition and writes without a lock, so the sweeper's threads could both pass the same
        condition on the budget item; real DynamoDB cannot. The lock gives moto DynamoDB's atomicity, nothing more
        (reentrant: the observer reads while a write holds it).
        """
        lock = threading.RLock()

        def acquire(**_: Any) -> None:
            lock.acquire()

        def release(**_: Any) -> None:
            lock.release()

        hooks = [
            ("before-call.dynamodb", acquire),
            ("after-call.dynamodb", self.observer.after_write),
            ("after-call.dynamodb", release),
            ("after-call-error.dynamodb", release),
        ]
        for event, hook in hooks:
            self.rt.clients.dynamodb.meta.events.register(event, hook)
        return hooks

    def teardown(self) -> None:
        try:
            self._everything_ends()
        finally:
            for event, hook in self._hooks:
                self.rt.clients.dynamodb.meta.events.unregister(event, hook)
            del self.env.acr.answer

    def _count_invokes(self) -> None:
        """Count the invokes and stops ACR accepted, per session; check each stop against the table."""
        double, original = self.env.acr, type(self.env.acr).answer
        observer = self.observer

        def answer(operation: str, session_id: str, body: dict[str, Any], qualifier: str = DEFAULT_QUALIFIER) -> Any:
            state = observer.states.get(session_id, SessionState.FINISHED)
            if operation == STOP and session_id in observer.agent_ended and state is not SessionState.FINISHED:
                observer.violations.append(f"{session_id}: stopped while {state} although its agent's result is stored")
            invoked_on = observer.endpoints.get(session_id)
            if operation == STOP and invoked_on is not None and qualifier != invoked_on:
                observer.violations.append(f"{session_id}: invoked on {invoked_on}, stopped on {qualifier}")
            error = original(double, operation, session_id, body, qualifier)
            if error is None and session_id in observer.starts:
                counts = observer.starts if operation == INVOKE else observer.stops
                counts[session_id] += 1
                if operation == INVOKE:
                    observer.endpoints[session_id] = qualifier
            return error

        double.answer = answer  # type: ignore[method-assign]

    # --- the dispatcher ---------------------------------------------------------------------------------

    def _deliver(self, rollout: Rollout, *, slot_wait_s: float | None) -> None:
        rollout.receives += 1
        until = None if slot_wait_s is None else self.clock.now + slot_wait_s
        try:
            dispatch(rollout.request, receive_count=rollout.receives, rt=self.rt, slot_wait_until=until)
        except RequeueError:
            rollout.queued_message = True
        else:
            rollout.queued_message = False

    @rule(index=st.integers(0, ROLLOUTS - 1), wait=st.sampled_from([None, 0.0, 2.0]))
    def deliver(self, index: int, wait: float | None) -> None:
        """The dispatch queue delivers a start message that is in it (a first receive or a requeued one)."""
        rollout = self.rollouts[index]
        if rollout.queued_message:
            self._deliver(rollout, slot_wait_s=wait)

    @rule(index=st.integers(0, ROLLOUTS - 1))
    def redeliver(self, index: int) -> None:
        """SQS delivers a start message again after it was handled (at-least-once)."""
        rollout = self.rollouts[index]
        if not rollout.queued_message and rollout.receives:
            self._deliver(rollout, slot_wait_s=None)

    @rule(index=st.integers(0, ROLLOUTS - 1))
    def dispatcher_dies_after_admitting(self, index: int) -> None:
        """A dispatcher admits a queued rollout (lease 10 s) and dies before it invokes."""
        rollout = self.rollouts[index]
        record = self.rt.ledger.get(rollout.request.session_id)
        if record is not None and record.state is SessionState.QUEUED:
            self.rt.ledger.admit(
                record.session_id, attempts_seen=record.attempts, owner="dead", lease_until=self.clock.now + 10
            )

    @rule(error=st.sampled_from([INTERNAL_SERVER, VALIDATION]))
    def next_invoke_fails(self, error: Any) -> None:
        """ACR answers the next invoke with a retryable or a final error."""
        self.env.acr.fail_next(INVOKE, error)

    @rule(index=st.integers(0, ROLLOUTS - 1))
    def trainer_cancels(self, index: int) -> None:
        """A cancel message (handled at once; a repeat is another step)."""
        cancel(self.env.cancel_request(self.rollouts[index].request), self.rt)

    # --- the agent, the finisher, the sweeper ---------------------------------------------------------------

    @rule(index=st.integers(0, ROLLOUTS - 1), status=st.sampled_from([Status.SUCCEEDED, Status.AGENT_ERROR]))
    def agent_stores_result(self, index: int, status: Status) -> None:
        """A running rollout's agent stores its result (first writer wins)."""
        rollout = self.rollouts[index]
        if self.observer.states[rollout.request.session_id] is SessionState.RUNNING:
            result = RolloutResult.terminal(
                status, key=rollout.request.key, s3_bucket=BUCKET, timings=Timings(finished_at=self.clock.now)
            )
            if self.rt.store.write_first(result).written:
                self.observer.agent_ended.add(rollout.request.session_id)

    @rule(error=st.sampled_from([INTERNAL_SERVER, THROTTLING]))
    def next_stop_fails(self, error: Any) -> None:
        """ACR answers the next stop with an error that may pass."""
        self.env.acr.fail_next(STOP, error)

    @rule(index=st.integers(0, ROLLOUTS - 1))
    def finisher_event(self, index: int) -> None:
        """The finisher handles the event of a stored result (events repeat: any number of times); a failed stop
        fails the record (it comes back), but the rollout is finished and its slot free all the same."""
        rollout = self.rollouts[index]
        if self.rt.store.exists(rollout.request.key):
            try:
                finish_rollout(self.rt.store.read(rollout.request.key), self.rt)
            except (AcrCallError, NoTokenError):
                if rollout.request.session_id not in self.observer.agent_ended:
                    return  # the agent may still run: the slot is held until a stop succeeds
            assert self.observer.states[rollout.request.session_id] is SessionState.FINISHED

    @rule()
    def sweeper_runs(self) -> None:
        sweep(self.rt)

    @rule(seconds=st.sampled_from([1.0, 11.0, 31.0, 95.0]))
    def time_passes(self, seconds: float) -> None:
        self.clock.sleep(seconds)

    # --- what holds after every step ---------------------------------------------------------------------

    @invariant()
    def only_moves_of_the_table(self) -> None:
        assert self.observer.violations == []

    @invariant()
    def slot_count_is_the_rollouts_holding_a_slot(self) -> None:
        holding = 0
        for session_id, item in self.observer.items().items():
            state = SessionState(item[ATTR_STATE]["S"]) if ATTR_STATE in item else None
            assert (ATTR_INFLIGHT in item) == (state in HOLDING_SLOT), (session_id, state)
            holding += ATTR_INFLIGHT in item
        assert self.rt.ledger.slots_held() == (holding, holding)

    @invariant()
    def started_at_most_once(self) -> None:
        assert max(self.observer.starts.values(), default=0) <= 1, self.observer.starts

    @invariant()
    def a_stored_result_never_changes(self) -> None:
        listed = self.rt.clients.s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{EXP_ID}/").get("Contents", [])
        etags = {entry["Key"]: entry["ETag"] for entry in listed}
        for rollout in self.rollouts:
            etag = etags.get(str(rollout.request.key))
            if rollout.result is None and etag is not None:
                rollout.result = (self.rt.store.read(rollout.request.key).status, etag)
            assert etag == (rollout.result and rollout.result[1]), rollout.request.session_id

    def _everything_ends(self) -> None:
        """Every message is handled until none is left and every deadline passed: each rollout ends exactly once."""
        self.clock.sleep(QUEUE_TIMEOUT_S + TIMEOUT_S + 1)
        self.env.acr.script[STOP].clear()
        for _ in range(3):
            for rollout in self.rollouts:
                if rollout.queued_message:
                    self._deliver(rollout, slot_wait_s=None)
            sweep(self.rt)
            for index in range(ROLLOUTS):
                self.finisher_event(index)
        assert self.observer.violations == []
        unstopped = [sid for sid, starts in self.observer.starts.items() if starts and not self.observer.stops[sid]]
        assert unstopped == [], "started sessions never stopped"
        recorded = {r.request.session_id: self.rt.ledger.get(r.request.session_id) for r in self.rollouts}
        for session_id, endpoint in self.observer.endpoints.items():
            record = recorded[session_id]
            assert record is not None and record.endpoint in (endpoint, None), (session_id, endpoint, record)
        self.a_stored_result_never_changes()
        for rollout in self.rollouts:
            record = self.rt.ledger.get(rollout.request.session_id)
            assert rollout.result is not None, rollout.request.session_id
            assert record is not None and record.state is SessionState.FINISHED, record
            assert record.status == rollout.result[0]
        assert self.rt.ledger.slots_held() == (0, 0)


def test_every_interleaving_moves_rollouts_only_as_the_table_says(env: Env) -> None:
    # GIVEN one experiment in moto and the ACR double; WHEN the functions run in random interleavings
    # THEN every write is a move of the table, slots stay exact, nothing starts twice, and everything ends once
    Lifecycle.env, Lifecycle.clock = env, SteppedClock()
    run_state_machine_as_test(
        Lifecycle,
        settings=settings(
            # 10 interleavings of 20 steps; fewer and shorter under `make check`'s profile (tests/conftest.py).
            max_examples=min(10, settings().max_examples),
            stateful_step_count=min(20, settings().stateful_step_count),
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )
