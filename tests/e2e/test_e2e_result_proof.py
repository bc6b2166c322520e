"""A result only the agent could have written (D100), on the real local stack.

Code in the agent's session (a policy's code would) writes the session's result itself through the S3 API with the
agent's credentials, a success with reward 1.0, before the agent stores its own. The trainer must not train on it.
"""

from __future__ import annotations

import boto3
import pytest
from e2e_support import wait_until

from local_stack.stack import LocalStack
from rollout_contract import Status
from rollout_contract.proof import RESULT_NOT_FROM_AGENT, Provenance
from trainer_client import RolloutClient

pytestmark = pytest.mark.e2e

RESULT_WAIT_S = 60


def test_a_result_forged_first_with_the_agents_credentials_ends_agent_error_and_the_next_rollout_is_proven(
    stack: LocalStack, client: RolloutClient
) -> None:
    # GIVEN an agent whose session runs code that stores a success with reward 1.0 at the session's key first
    forged = client.invoke({"action": "forge", "reward": 0.0}, input_id="forged", timeout=60)
    # WHEN the rollout ends
    result = forged.result(timeout=RESULT_WAIT_S)
    # THEN the trainer does not read the forged reward: agent_error, saying the result is not the agent's
    assert (result.status, result.reward) == (Status.AGENT_ERROR, None)
    assert result.error.type == RESULT_NOT_FROM_AGENT
    assert "result not written by the rollout's agent" in result.error.message
    assert result.provenance == Provenance.UNPROVEN
    # AND the views that read stored results say the same
    (listed,) = [r for r in client.results() if r.session_id == forged.session_id]
    assert (listed.status, listed.error.type) == (Status.AGENT_ERROR, RESULT_NOT_FROM_AGENT)
    # AND the forged object is what S3 holds (first writer wins: the agent's own write was refused)
    stored = boto3.client("s3").get_object(Bucket=forged.s3_bucket, Key=forged.result_key)
    assert b'"rewards": 1.0' in stored["Body"].read() and "rollout-proof" not in stored["Metadata"]
    # AND the next rollout is unaffected: the agent's own result, proven
    honest = client.invoke({"action": "succeed", "reward": 0.5}, input_id="honest", timeout=60).result(RESULT_WAIT_S)
    assert (honest.status, honest.reward, honest.provenance) == (Status.SUCCEEDED, 0.5, Provenance.PROVEN)


def test_the_functions_own_results_are_proven_too(client: RolloutClient) -> None:
    # GIVEN rollouts the functions end: the sweeper at a deadline (the agent dies), the dispatcher on a cancel
    crashed = client.invoke({"action": "crash"}, input_id="crash-proof", timeout=4)
    cancelled = client.invoke({"action": "succeed", "sleep_s": 60}, input_id="cancel-proof", timeout=120)
    cancelled.cancel()
    # THEN their results verify as the functions' and end as they should, not as forgeries
    timed_out = crashed.result(timeout=RESULT_WAIT_S)
    assert (timed_out.status, timed_out.provenance) == (Status.TIMED_OUT, Provenance.PROVEN)

    def cancelled_result() -> list[tuple[Status, str | None]]:
        return [(r.status, r.provenance) for r in client.results() if r.session_id == cancelled.session_id]

    assert wait_until(lambda: cancelled_result() == [(Status.CANCELLED, Provenance.PROVEN)])
