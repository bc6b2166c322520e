"""Multi-turn token assembly, checked with property tests over random multi-turn traces.

Each generated rollout is a list of *episodes*; an episode is one conversation whose every call's prompt
is the previous call's prompt + completion + spliced (tool/environment) tokens. A new episode's first
prompt never extends the previous context, so it must open a new row.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer_client import TokenTrace
from trainer_client.backends.assembly import TokenRow, TraceMismatchError, assemble_rows, is_prefix
from trainer_client.routing import RoutedExperts

VOCAB = 40  # small, so accidental token coincidences happen and are exercised


@dataclass(frozen=True)
class Call:
    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    logprobs: list[float] | None
    finish_reason: str | None = "stop"
    routed_experts: RoutedExperts | None = None


tokens = st.lists(st.integers(0, VOCAB - 1), max_size=8)


@st.composite
def episode_specs(draw) -> list[tuple[list[int], list[tuple[list[int], list[float], list[int]]]]]:
    """Episodes as (first prompt, [(completion, its logprobs, spliced tokens after it)])."""
    specs = []
    for _ in range(draw(st.integers(1, 4))):
        first_prompt = draw(st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=10))
        turns = []
        for _ in range(draw(st.integers(1, 5))):
            completion = draw(tokens)
            logprobs = draw(st.lists(st.floats(-20.0, -0.001), min_size=len(completion), max_size=len(completion)))
            turns.append((completion, logprobs, draw(tokens)))
        specs.append((first_prompt, turns))
    return specs


def build_episodes(specs) -> list[list[Call]]:
    """Turn (first prompt, [(completion, logprobs, spliced)]) specs into calls; break the prefix between episodes."""
    episodes: list[list[Call]] = []
    context: list[int] | None = None
    for first_prompt, episode_turns in specs:
        prompt = list(first_prompt)
        if context is not None and is_prefix(context, prompt):
            prompt[0] = (context[0] + 1) % VOCAB
        calls = []
        for completion, logprobs, spliced in episode_turns:
            calls.append(Call(prompt, completion, logprobs))
            context = prompt + completion
            prompt = context + spliced
        episodes.append(calls)
    return episodes


def check_row(row: TokenRow, calls: list[Call]) -> None:
    """Assert every invariant of a row assembled from ``calls`` (one episode)."""
    full = row.prompt_ids + row.response_ids
    assert len(row.response_ids) == len(row.response_mask) == len(row.response_logprobs)
    assert row.prompt_ids == calls[0].prompt_token_ids
    assert full == calls[-1].prompt_token_ids + calls[-1].completion_token_ids
    assert row.num_calls == len(calls)
    assert row.num_sampled == sum(len(call.completion_token_ids) for call in calls)
    for call in calls:
        start = len(call.prompt_token_ids) - len(row.prompt_ids)
        end = start + len(call.completion_token_ids)
        assert is_prefix(call.prompt_token_ids + call.completion_token_ids, full)
        assert row.response_ids[start:end] == call.completion_token_ids
        assert row.response_mask[start:end] == [1] * len(call.completion_token_ids)
        assert row.response_logprobs[start:end] == call.logprobs
    masked = [lp for lp, m in zip(row.response_logprobs, row.response_mask, strict=True) if not m]
    assert masked == [0.0] * len(masked)


@settings(deadline=None)
@given(episode_specs())
def test_one_row_per_unbroken_run_of_calls(specs):
    episodes = build_episodes(specs)
    rows = assemble_rows(call for episode in episodes for call in episode)
    assert len(rows) == len(episodes)
    for row, calls in zip(rows, episodes, strict=True):
        check_row(row, calls)
        assert not row.truncated


@settings(deadline=None)
@given(episode_specs(), st.integers(1, 30), st.integers(1, 60))
def test_truncation_keeps_prompt_end_and_response_start_with_mask_and_logprobs_aligned(specs, max_prompt, max_response):
    calls = [call for episode in build_episodes(specs) for call in episode]
    full_rows = assemble_rows(calls)
    rows = assemble_rows(calls, max_prompt_length=max_prompt, max_response_length=max_response)
    assert len(rows) == len(full_rows)
    for row, full in zip(rows, full_rows, strict=True):
        assert row.prompt_ids == full.prompt_ids[-max_prompt:]
        assert row.response_ids == full.response_ids[:max_response]
        assert row.response_mask == full.response_mask[:max_response]
        assert row.response_logprobs == full.response_logprobs[:max_response]
        cut = len(full.prompt_ids) > max_prompt or len(full.response_ids) > max_response
        assert row.truncated is cut


@settings(deadline=None)
@given(episode_specs(), st.data())
def test_the_row_checker_fails_when_one_token_is_shifted(specs, data):
    episode = build_episodes(specs)[0]
    (row,) = assemble_rows(episode)
    check_row(row, episode)
    sampled = [i for i, m in enumerate(row.response_mask) if m]
    if not sampled:
        return
    i = data.draw(st.sampled_from(sampled))
    one_token_changed = row.response_ids[:i] + [(row.response_ids[i] + 1) % VOCAB] + row.response_ids[i + 1 :]
    for shifted in (
        replace(row, response_ids=one_token_changed),
        replace(row, response_mask=row.response_mask[1:] + [0]),
        replace(row, response_logprobs=row.response_logprobs[1:] + [0.0]),
    ):
        with pytest.raises(AssertionError):
            check_row(shifted, episode)


def test_a_retokenized_prompt_starts_a_new_row():
    # GIVEN a second turn whose prompt re-tokenized the first completion (token 7 became 70, 71)
    first = Call([1, 2, 3], [7, 8], [-0.5, -0.25])
    drifted = Call([1, 2, 3, 70, 71, 8, 9], [5], [-1.0])
    # WHEN the calls are assembled
    rows = assemble_rows([first, drifted])
    # THEN the drifted call is its own row and no spliced token is marked as sampled
    assert [(r.prompt_ids, r.response_ids, r.response_mask) for r in rows] == [
        ([1, 2, 3], [7, 8], [1, 1]),
        ([1, 2, 3, 70, 71, 8, 9], [5], [1]),
    ]


def test_a_multi_turn_conversation_splices_tool_tokens_with_mask_zero():
    calls = [Call([1, 2], [3, 4], [-0.1, -0.2]), Call([1, 2, 3, 4, 9, 9], [5], [-0.3], "length")]
    (row,) = assemble_rows(calls)
    assert row.prompt_ids == [1, 2]
    assert row.response_ids == [3, 4, 9, 9, 5]
    assert row.response_mask == [1, 1, 0, 0, 1]
    assert row.response_logprobs == [-0.1, -0.2, 0.0, 0.0, -0.3]
    assert (row.num_calls, row.finish_reason) == (2, "length")


def test_gateway_token_traces_are_accepted_as_they_come():
    trace = TokenTrace(trace_id="t", session_id="s", prompt_token_ids=[1], completion_token_ids=[2], logprobs=[-1.0])
    (row,) = assemble_rows([trace])
    assert (row.prompt_ids, row.response_ids, row.response_logprobs) == ([1], [2], [-1.0])


def test_a_call_without_logprobs_leaves_the_row_without_logprobs():
    (row,) = assemble_rows([Call([1], [2], [-1.0]), Call([1, 2, 3], [4], None)])
    assert row.response_logprobs is None
    assert row.response_mask == [1, 0, 1]


def test_logprobs_that_do_not_match_the_completion_are_an_error():
    with pytest.raises(TraceMismatchError, match="call 1 has 1 logprobs for 2 completion tokens"):
        assemble_rows([Call([1], [2], [-1.0]), Call([1, 2], [3, 4], [-1.0])])


def test_no_calls_no_rows_and_bad_limits_are_refused():
    assert assemble_rows([]) == []
    with pytest.raises(ValueError, match="max_response_length must be at least 1"):
        assemble_rows([], max_response_length=0)


LAYERS, TOP_K = 2, 2


def route(token: int, position: int) -> list[list[int]]:
    """A deterministic router: the experts of each layer for ``token`` at ``position``."""
    return [[(token * 7 + position + layer) % 64, (token + 3 * layer) % 64] for layer in range(LAYERS)]


def routed(call: Call) -> Call:
    """``call`` with the routing a server records: one row per token fed through the model (not the last)."""
    sequence = call.prompt_token_ids + call.completion_token_ids
    rows = [route(token, position) for position, token in enumerate(sequence[:-1])]
    return replace(call, routed_experts=RoutedExperts.from_nested(rows) if rows else None)


@settings(max_examples=150, deadline=None)
@given(episode_specs(), st.integers(1, 12), st.integers(1, 12))
def test_each_rows_routing_is_the_routing_of_its_tokens_through_prefix_breaks_and_truncation(
    specs, max_prompt, max_response
):
    # GIVEN calls that carry a server's per-token routing, over episodes that break the prefix
    episodes = [[routed(call) for call in episode] for episode in build_episodes(specs)]
    calls = [call for episode in episodes for call in episode]
    if any(call.routed_experts is None for call in calls):
        return  # a one-token call has no routed token: its row carries no routing (checked below)
    # WHEN they are assembled, cut to the limits
    rows = assemble_rows(calls, max_prompt_length=max_prompt, max_response_length=max_response)
    # THEN row i of a row's routing is the routing of token i of prompt + response, as the server fed it
    for row, episode in zip(rows, episodes, strict=True):
        uncut = episode[0].prompt_token_ids
        offset = max(len(uncut) - max_prompt, 0)
        full = row.prompt_ids + row.response_ids
        assert row.routed_experts is not None
        assert (
            row.routed_experts.nested()
            == [route(token, offset + i) for i, token in enumerate(full)][: row.routed_experts.tokens]
        )
        assert row.routed_experts.tokens >= len(full) - 1  # every token but the row's very last was fed


def test_a_row_with_one_call_without_routing_carries_none():
    first = routed(Call([1, 2, 3], [7, 8], [-0.5, -0.25]))
    second = Call([1, 2, 3, 7, 8, 9], [5], [-1.0])
    (row,) = assemble_rows([first, second])
    assert row.routed_experts is None
    (alone,) = assemble_rows([first])
    assert alone.routed_experts == first.routed_experts
