"""Multi-turn token assembly: a rollout's token traces -> training rows, with no framework imported.

The token gateway records one trace per model call: the exact ``prompt_token_ids`` the server rendered,
the ``completion_token_ids`` it sampled and their ``logprobs``. An agent's turns are separate calls, so a
trainer must splice them back into sequences:

- The first call opens a row: ``prompt_ids`` is its prompt, its completion is the first response span
  (mask 1, its logprobs).
- A later call whose prompt *extends* the row's ``prompt_ids + response_ids`` token for token continues the
  row: the extra prompt tokens (tool results, environment text, the chat template's turn markers) are
  appended with mask 0 and logprob 0.0, then its completion with mask 1 and its logprobs.
- A call whose prompt does not extend the row (the agent rewrote its history, or the chat template
  re-tokenized earlier text differently: retokenization drift) closes the row and opens a new one. Rows
  are never merged on text: a token that was not sampled is never trained as if it were.

Truncation (``max_prompt_length`` / ``max_response_length``) keeps the END of the prompt (the tokens next
to the response) and the START of the response; ``response_mask`` and ``response_logprobs`` are cut at
the same index as ``response_ids``, so they stay aligned. ``TokenRow.truncated`` says that a side was cut.

MoE routing (router replay): when every call of a row carries its per-token routing
(:class:`trainer_client.routing.RoutedExperts`, rows from the first prompt token), the row's routing is each
position's routing from the first call that fed that position through the model: the first call's rows, then
each later call's rows past those. It is cut with the prompt and the response, so row ``i`` of
``TokenRow.routed_experts`` stays the routing of token ``i`` of ``prompt_ids + response_ids``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from trainer_client.routing import RoutedExperts

__all__ = ["TokenCall", "TokenRow", "TraceMismatchError", "assemble_rows", "is_prefix"]


class TokenCall(Protocol):
    """What assembly reads from one model call (``trainer_client.TokenTrace`` has these fields)."""

    # Read-only members, so that classes with list-typed fields (TokenTrace) match the protocol.
    @property
    def prompt_token_ids(self) -> Sequence[int]: ...
    @property
    def completion_token_ids(self) -> Sequence[int]: ...
    @property
    def logprobs(self) -> Sequence[float] | None: ...
    @property
    def finish_reason(self) -> str | None: ...
    @property
    def routed_experts(self) -> RoutedExperts | None: ...


class TraceMismatchError(ValueError):
    """A trace's logprobs do not line up with its completion tokens (one logprob per sampled token)."""


@dataclass(slots=True)
class TokenRow:
    """One training sequence: a prompt and the response that followed it over one or more model calls.

    Attributes:
        prompt_ids: the first call's prompt (its end, if truncated).
        response_ids: completions and the tokens spliced in between them, in order.
        response_mask: per response token, 1 if the policy sampled it, 0 if it was spliced in.
        response_logprobs: per response token, the sampling logprob (0.0 where the mask is 0); ``None``
            when a call of the row came without logprobs (frameworks then recompute them).
        num_calls: how many model calls the row joins.
        finish_reason: the last call's finish reason (``"length"`` means the server cut the completion).
        truncated: the prompt or the response was cut to the requested length.
        routed_experts: per-token MoE routing of ``prompt_ids + response_ids`` (``None`` unless every call of
            the row carried routing).
    """

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    response_logprobs: list[float] | None = field(default_factory=list)
    num_calls: int = 0
    finish_reason: str | None = None
    truncated: bool = False
    routed_experts: RoutedExperts | None = None
    #: The row's routing rows so far, flat (``None`` once a call came without routing).
    _routing: list[int] | None = field(default_factory=list, init=False, repr=False)

    @property
    def num_sampled(self) -> int:
        """How many response tokens the policy sampled (mask 1)."""
        return sum(self.response_mask)

    def _extend(self, call: TokenCall) -> None:
        spliced = len(call.prompt_token_ids) - len(self.prompt_ids) - len(self.response_ids)
        completion = list(call.completion_token_ids)
        self.response_ids += list(call.prompt_token_ids[len(call.prompt_token_ids) - spliced :]) + completion
        self.response_mask += [0] * spliced + [1] * len(completion)
        if self.response_logprobs is not None and call.logprobs is not None:
            self.response_logprobs += [0.0] * spliced + [float(lp) for lp in call.logprobs]
        else:
            self.response_logprobs = None
        self.num_calls += 1
        self.finish_reason = call.finish_reason
        self._add_routing(call.routed_experts)

    def _add_routing(self, routing: RoutedExperts | None) -> None:
        if (
            self._routing is None
            or routing is None
            or (
                self.routed_experts is not None
                and (routing.layers, routing.top_k) != (self.routed_experts.layers, self.routed_experts.top_k)
            )
        ):
            self._routing, self.routed_experts = None, None
            return
        per_token = routing.layers * routing.top_k
        known = len(self._routing) // per_token
        if routing.tokens > known:
            self._routing += routing.ids()[known * per_token :]
        self.routed_experts = RoutedExperts.from_ids(
            self._routing, tokens=len(self._routing) // per_token, layers=routing.layers, top_k=routing.top_k
        )

    def _truncate(self, max_prompt_length: int | None, max_response_length: int | None) -> None:
        if max_prompt_length is not None and len(self.prompt_ids) > max_prompt_length:
            cut = len(self.prompt_ids) - max_prompt_length
            self.prompt_ids = self.prompt_ids[cut:]
            if self.routed_experts is not None:
                self.routed_experts = self.routed_experts.window(cut, self.routed_experts.tokens)
            self.truncated = True
        if max_response_length is not None and len(self.response_ids) > max_response_length:
            self.response_ids = self.response_ids[:max_response_length]
            self.response_mask = self.response_mask[:max_response_length]
            if self.response_logprobs is not None:
                self.response_logprobs = self.response_logprobs[:max_response_length]
            if self.routed_experts is not None:
                self.routed_experts = self.routed_experts.window(0, len(self.prompt_ids) + max_response_length)
            self.truncated = True


def is_prefix(prefix: Sequence[int], sequence: Sequence[int]) -> bool:
    """Whether ``sequence`` starts with ``prefix``, token for token."""
    return len(prefix) <= len(sequence) and list(sequence[: len(prefix)]) == list(prefix)


def assemble_rows(
    calls: Iterable[TokenCall],
    *,
    max_prompt_length: int | None = None,
    max_response_length: int | None = None,
) -> list[TokenRow]:
    """Splice a rollout's model calls (in call order) into training rows; see the module docstring.

    Args:
        calls: the rollout's traces in call order (``ClientResult.token_traces``).
        max_prompt_length: keep at most this many prompt tokens (the last ones).
        max_response_length: keep at most this many response tokens (the first ones).

    Returns:
        One row per run of calls that extend each other; ``[]`` for no calls.

    Raises:
        TraceMismatchError: a call's logprobs are not one per completion token.
        ValueError: a length limit below 1.
    """
    for name, limit in (("max_prompt_length", max_prompt_length), ("max_response_length", max_response_length)):
        if limit is not None and limit < 1:
            raise ValueError(f"{name} must be at least 1 (or None for no limit), got {limit}")
    rows: list[TokenRow] = []
    row: TokenRow | None = None
    for index, call in enumerate(calls):
        if call.logprobs is not None and len(call.logprobs) != len(call.completion_token_ids):
            raise TraceMismatchError(
                f"call {index} has {len(call.logprobs)} logprobs for {len(call.completion_token_ids)} completion "
                "tokens; training needs one logprob per sampled token id: serve the policy with a server that "
                "returns token ids and logprobs (vLLM >= 0.10.2 with return_token_ids) behind the token gateway"
            )
        if row is None or not is_prefix(row.prompt_ids + row.response_ids, call.prompt_token_ids):
            row = TokenRow(prompt_ids=list(call.prompt_token_ids))
            rows.append(row)
        row._extend(call)
    for row in rows:
        row._truncate(max_prompt_length, max_response_length)
    return rows
