"""Invokes over several runtime endpoints: a wait for a slot follows whichever endpoint's slot comes first."""

from __future__ import annotations

import time

from lambdas.dispatcher import DispatchOutcome, dispatch
from lambdas.runtime import Runtime
from rollout_contract.budgets import ATTR_NEXT_AT, tps_budget_id
from rollout_contract.resources import BUDGET_PARTITION_KEY
from tests.lambdas.conftest import INVOKE, Env


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
