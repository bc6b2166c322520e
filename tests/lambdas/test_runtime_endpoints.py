"""Invokes over several runtime endpoints: a wait for a slot follows whichever endpoint's slot comes first, and a
sandbox, like a rollout, starts on the endpoint whose slot is soonest and stays there."""

from __future__ import annotations

import time

from lambdas.dispatcher import DispatchOutcome, dispatch
from lambdas.runtime import Runtime
from rollout_contract import ExperimentDescriptor
from rollout_contract.budgets import ATTR_NEXT_AT, tps_budget_id
from rollout_contract.resources import BUDGET_PARTITION_KEY
from rollout_contract.sandbox import new_sandbox_session_id
from tests.lambdas.conftest import INVOKE, REGION, STOP, Env
from trainer_client.sandbox._budget import SandboxBudget, SandboxStart


def reserve_ahead(env: Env, qualifier: str, seconds: float) -> None:
    """Another process has reserved endpoint ``qualifier``'s invoke budget up to ``seconds`` from now."""
    env.rt.clients.dynamodb.put_item(
        TableName=env.rt.settings.budget_table,
        Item={
            BUDGET_PARTITION_KEY: {"S": tps_budget_id(env.rt.settings.runtime_arn, qualifier)},
            ATTR_NEXT_AT: {"N": str(time.time() + seconds)},
        },
    )


def test_an_invoke_waiting_for_a_slot_takes_another_endpoints_when_its_first_choice_is_taken_meanwhile(
    env: Env,
) -> None:
    # GIVEN two endpoints, both reserved beyond the invoke horizon (1 s): DEFAULT's slot in reach first
    reserve_ahead(env, "DEFAULT", 1.2)
    reserve_ahead(env, "endpoint_1", 1.6)
    taken: list[float] = []

    def sleep(seconds: float) -> None:
        if not taken:  # while the dispatcher sleeps, other callers (stops, dispatchers) take DEFAULT's slots
            reserve_ahead(env, "DEFAULT", 8.0)
            taken.append(seconds)
        time.sleep(seconds)

    rt = Runtime.build(env.rt.settings.model_copy(update={"runtime_endpoints": 2}), env.rt.clients, sleep=sleep)
    request = env.start_request()

    # WHEN a rollout is dispatched
    outcome = dispatch(request, receive_count=1, rt=rt)

    # THEN it was invoked on endpoint_1 once that slot came in reach, instead of waiting on DEFAULT and going back
    # to its queue (DEFAULT's next slot is beyond the invoke wait)
    assert taken, "the dispatcher never waited"
    assert outcome is DispatchOutcome.INVOKED
    assert [call.qualifier for call in env.acr.calls_of(INVOKE)] == ["endpoint_1"]
    assert rt.ledger.get(request.session_id).endpoint == "endpoint_1"


def test_a_sandbox_starts_where_a_slot_is_soonest_and_every_later_call_and_its_stop_go_there(env: Env) -> None:
    # GIVEN a sandbox experiment of two endpoints whose DEFAULT budget is reserved beyond the invoke horizon
    settings = env.rt.settings
    descriptor = ExperimentDescriptor(
        exp_id=settings.exp_id,
        region=REGION,
        results_bucket=settings.results_bucket,
        dispatch_queue_url=settings.dispatch_queue_url,
        completion_queue_url="https://sqs/unused",
        sessions_table=settings.sessions_table,
        budget_table=settings.budget_table,
        runtime_arn=settings.runtime_arn,
        runtime_endpoints=2,
        tps_limit=settings.tps_limit,
        session_budget=settings.session_budget,
    )
    clients = env.rt.clients
    budget = SandboxBudget(descriptor, agentcore=clients.agentcore, dynamodb=clients.dynamodb, trainer_id="t-1")
    reserve_ahead(env, "DEFAULT", 3.0)
    now = time.time()
    start = SandboxStart(settings.exp_id, "task-1", new_sandbox_session_id(), "t-1", now, now + 600)

    # WHEN it is started (slot, first call, running) and DEFAULT's budget is idle again
    budget.admit(start, until=now + 5)
    budget.call(start.session_id, {"action": "start"})
    assert budget.mark_running(start.session_id, started_at=now, deadline_at=now + 60)
    reserve_ahead(env, "DEFAULT", -60.0)
    # AND it is called again, by this client and by another that attached to it, then terminated
    budget.call(start.session_id, {"action": "exec"})
    attached = SandboxBudget(descriptor, agentcore=clients.agentcore, dynamodb=clients.dynamodb, trainer_id="t-2")
    attached.call(start.session_id, {"action": "exec"})
    attached.terminate(start.key)

    # THEN its first call went to endpoint_1, which its item records, and every later call and its stop went there
    assert budget.ledger.get(start.session_id).endpoint == "endpoint_1"
    assert [call.qualifier for call in env.acr.calls_of(INVOKE)] == ["endpoint_1"] * 3
    assert [call.qualifier for call in env.acr.calls_of(STOP)] == ["endpoint_1"]
