"""The one retry policy for what botocore does not retry: attempts, capped jittered waits, what it retries."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from rollout_contract.retry import RetryPolicy, transaction_conflict


def _cancelled(*reasons: str) -> ClientError:
    return ClientError(
        {
            "Error": {"Code": "TransactionCanceledException", "Message": "cancelled"},
            "CancellationReasons": [{"Code": reason} for reason in reasons],
        },
        "TransactWriteItems",
    )


def test_a_call_is_tried_again_while_its_error_is_retryable_then_returns() -> None:
    # GIVEN a call that conflicts twice, then succeeds
    errors = [_cancelled("None", "TransactionConflict"), _cancelled("TransactionConflict")]

    def attempt() -> str:
        if errors:
            raise errors.pop(0)
        return "done"

    waits: list[float] = []
    # WHEN it runs under a policy of 3 attempts
    result = RetryPolicy(attempts=3, base_delay_s=0.1, max_delay_s=0.15).call(
        attempt, retry_on=transaction_conflict, sleep=waits.append
    )
    # THEN the third attempt's result comes back after two waits, each within its doubling, capped bound
    assert result == "done"
    assert len(waits) == 2 and 0 <= waits[0] <= 0.1 and 0 <= waits[1] <= 0.15


def test_the_last_attempts_error_and_an_error_not_retried_are_raised() -> None:
    # GIVEN a policy of 2 attempts
    policy = RetryPolicy(attempts=2, base_delay_s=0, max_delay_s=0)
    calls: list[int] = []

    def conflicting() -> None:
        calls.append(1)
        raise _cancelled("TransactionConflict")

    # WHEN / THEN a call that always conflicts raises after 2 attempts
    with pytest.raises(ClientError):
        policy.call(conflicting, retry_on=transaction_conflict, sleep=lambda _: None)
    assert len(calls) == 2

    # AND a transaction whose condition failed is not a conflict: raised at once
    def condition_failed() -> None:
        calls.append(1)
        raise _cancelled("ConditionalCheckFailed", "TransactionConflict")

    with pytest.raises(ClientError):
        policy.call(condition_failed, retry_on=transaction_conflict, sleep=lambda _: None)
    assert len(calls) == 3
