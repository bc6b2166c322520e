"""Staleness token by token: which weight version sampled each trained token, and the lag's p50 and max."""

from __future__ import annotations

from trainer_client import TokenTrace
from trainer_client.backends.assembly import assemble_rows
from trainer_client.staleness import Staleness, trained_tokens_by_version


def _call(prompt: list[int], completion: list[int], version: int | None) -> TokenTrace:
    return TokenTrace(
        trace_id=str(prompt),
        session_id="s",
        prompt_token_ids=prompt,
        completion_token_ids=completion,
        logprobs=[-0.1] * len(completion),
        weight_version=version,
    )


def test_each_trained_token_counts_for_the_version_that_sampled_it_after_the_cut():
    # GIVEN two calls of one row (versions 3, then 4 after a push) and a call that breaks the prefix (version 4)
    calls = [
        _call([1, 2], [5, 6, 7], 3),
        _call([1, 2, 5, 6, 7, 9], [8, 8], 4),
        _call([1, 9], [4], None),
    ]
    # WHEN the rows are cut to 5 response tokens: the first row keeps 3 + 1 spliced + 1 of the second call's
    rows = assemble_rows(calls, max_response_length=5)
    # THEN each version is counted for the tokens of it that are trained; a call with no version counts nothing
    assert trained_tokens_by_version(rows, calls) == {3: 3, 4: 1}
    assert trained_tokens_by_version(assemble_rows(calls), calls) == {3: 3, 4: 2}


def test_the_median_token_and_the_largest_lag_behind_the_current_version():
    assert Staleness.of(5, {3: 2, 4: 6}) == Staleness(current=5, p50=1, max=2, tokens=8)
    assert Staleness.of(5, {3: 4, 5: 4}) == Staleness(current=5, p50=1, max=2, tokens=8)  # between the middle two
    assert Staleness.of(5, {5: 3}) == Staleness(current=5, p50=0, max=0, tokens=3)
    assert Staleness.of(5, {4: 0}) is None
