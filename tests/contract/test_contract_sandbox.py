"""Sandbox sessions in the contract: their reserved id prefix, and the experiment a runtime belongs to."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from rollout_contract import DispatchRequest, InvalidIdError, validate_rollout_session_id, validate_session_id
from rollout_contract.resources import ExperimentDescriptor, ExperimentKind, experiment_of_runtime
from rollout_contract.sandbox import SANDBOX_SESSION_PREFIX, is_sandbox_session, new_sandbox_session_id

ARN = "arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/{}"


def test_a_new_sandbox_session_id_is_a_sandbox_id_acr_accepts():
    session_id = new_sandbox_session_id()
    assert session_id.startswith(SANDBOX_SESSION_PREFIX) and is_sandbox_session(session_id)
    assert validate_session_id(session_id) == session_id


def test_a_rollout_may_not_take_a_sandbox_id_so_the_sweeper_never_ends_a_rollout_without_a_result():
    # GIVEN a sandbox's id
    session_id = new_sandbox_session_id()

    # WHEN a rollout is given it, THEN it is refused, saying the prefix is reserved
    with pytest.raises(InvalidIdError, match="reserved for sandbox sessions"):
        validate_rollout_session_id(session_id)
    with pytest.raises(ValidationError, match="reserved for sandbox sessions"):
        DispatchRequest(exp_id="demo", input_id="q", session_id=session_id, payload={}, timeout_s=60)


@pytest.mark.parametrize(
    ("runtime", "experiment"),
    [
        ("rollout_swe_bench-AbCdEf1234", "swe-bench"),
        ("rollout_demo-0123456789", "demo"),
        ("sandbox-demo", None),  # the local stack's naming: give the experiment instead
        ("rollout_Bad-0123456789", None),
    ],
)
def test_the_experiment_of_a_runtime_is_read_back_from_the_stacks_name_for_it(runtime: str, experiment: str | None):
    assert experiment_of_runtime(ARN.format(runtime)) == experiment


def test_a_descriptor_without_a_kind_describes_an_agent_experiment():
    # GIVEN a descriptor published before sandboxes existed
    descriptor = ExperimentDescriptor.model_validate(
        {
            "exp_id": "demo",
            "region": "us-east-1",
            "results_bucket": "b",
            "dispatch_queue_url": "d",
            "completion_queue_url": "c",
            "sessions_table": "s",
            "budget_table": "t",
            "runtime_arn": ARN.format("rollout_demo-0123456789"),
        }
    )
    assert descriptor.kind is ExperimentKind.AGENT
