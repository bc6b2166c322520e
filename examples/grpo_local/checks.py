"""What the GRPO example checks on every batch, before it trains on it.

- Staleness: every trace's ``weight_version`` (the server's, stored whole by the gateway) is the step
  that sampled it; the off-policy fraction is the share of traces where it is not.
- Ids: a rollout's calls assemble into one row, and that row's prompt + response ids are exactly the last
  call's ``prompt_token_ids + completion_token_ids`` (the server's ids, across turns).
- Mask: the response is, in order, each call's completion ids (mask 1) and between them the tokens the
  chat template splices in (mask 0): ``<|im_end|>`` if the call was cut by ``max_tokens``, each tool
  message ``<|im_start|>tool\\n{result}<|im_end|>``, then ``<|im_start|>assistant\\n``. The expectation is
  rebuilt from the trace's messages and the template's text, independently of the assembly.
- Logprobs: the trainer's recomputation under the same weights (fp32, one forward pass per batch) minus
  the server's sampled logprobs, over every mask-1 token: max absolute difference
  <= :data:`LOGPROB_TOLERANCE`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from local_stack.tiny_policy.chat_template import IM_END, IM_START, ChatTokenizer
from trainer_client import RolloutGroup, TokenTrace
from trainer_client.backends.assembly import TokenRow, assemble_rows

__all__ = ["LOGPROB_TOLERANCE", "BatchChecks", "TrainingRow", "expected_response", "rows_of_group"]

LOGPROB_TOLERANCE = 1e-4
_TOKENIZER = ChatTokenizer()


@dataclass(frozen=True)
class TrainingRow:
    """One assembled rollout, ready for the loss."""

    ids: list[int]
    prompt_length: int
    mask: list[int]
    logprobs: list[float]
    advantage: float

    @classmethod
    def of(cls, row: TokenRow, advantage: float) -> TrainingRow:
        """The training row of an assembled row (which must carry logprobs)."""
        if row.response_logprobs is None:
            raise ValueError("the row has no logprobs: a call of it was made without logprobs")
        ids = row.prompt_ids + row.response_ids
        return cls(ids, len(row.prompt_ids), row.response_mask, row.response_logprobs, advantage)


@dataclass
class BatchChecks:
    """Counts of what was checked and what failed (see the module docstring)."""

    traces: int = 0
    version_mismatches: int = 0
    rollouts: int = 0
    rows_split: int = 0
    missing_logprobs: int = 0
    ids_mismatches: int = 0
    mask_errors: int = 0
    spliced_tokens: int = 0
    tokens_checked: int = 0
    logprob_max_abs_diff: float = 0.0

    def merge(self, other: BatchChecks) -> None:
        """Add ``other``'s counts (the max for the logprob difference)."""
        for item in fields(self):
            mine, theirs = getattr(self, item.name), getattr(other, item.name)
            setattr(self, item.name, max(mine, theirs) if isinstance(mine, float) else mine + theirs)

    @property
    def passed(self) -> bool:
        """Whether every check held: versions, one row per rollout with logprobs, ids, mask, logprob tolerance."""
        return (
            self.tokens_checked > 0
            and not (self.version_mismatches or self.rows_split or self.missing_logprobs)
            and not (self.ids_mismatches or self.mask_errors)
            and self.logprob_max_abs_diff <= LOGPROB_TOLERANCE
        )

    def as_record(self) -> dict[str, Any]:
        """The counts, the off-policy fraction and whether the checks passed, for the JSONL log."""
        return {
            **asdict(self),
            "off_policy_fraction": self.version_mismatches / self.traces if self.traces else 0.0,
            "token_checks_passed": self.passed,
        }

    def check_rollout(self, traces: Sequence[TokenTrace], step: int) -> list[TokenRow]:
        """Check one rollout's traces; return its assembled rows."""
        self.rollouts += 1
        self.traces += len(traces)
        self.version_mismatches += sum(_weight_version(trace) != step for trace in traces)
        rows = assemble_rows(traces)
        if len(rows) != 1:
            self.rows_split += 1
            return rows
        row, last = rows[0], traces[-1]
        if row.prompt_ids + row.response_ids != [*last.prompt_token_ids, *last.completion_token_ids]:
            self.ids_mismatches += 1
        ids, mask = expected_response(traces)
        if row.response_ids != ids or row.response_mask != mask:
            self.mask_errors += 1
        self.spliced_tokens += row.response_mask.count(0)
        return rows

    def compare_logprobs(self, rows: Sequence[TrainingRow], recompute: Callable[[Any], Any]) -> None:
        """Recompute every row's logprobs with ``recompute(ids [B, L]) -> [B, L - 1]`` and compare (mask 1)."""
        import torch

        if not rows:
            return
        length = max(len(row.ids) for row in rows)
        ids = torch.zeros((len(rows), length), dtype=torch.long)
        for index, row in enumerate(rows):
            ids[index, : len(row.ids)] = torch.tensor(row.ids)
        recomputed = recompute(ids)
        for index, row in enumerate(rows):
            for offset, (sampled, logprob) in enumerate(zip(row.mask, row.logprobs, strict=True)):
                if sampled:
                    diff = abs(float(recomputed[index, row.prompt_length - 1 + offset]) - logprob)
                    self.logprob_max_abs_diff = max(self.logprob_max_abs_diff, diff)
                    self.tokens_checked += 1


def expected_response(traces: Sequence[TokenTrace]) -> tuple[list[int], list[int]]:
    """The response ids and mask a rollout's calls must assemble into, from the chat template's text."""
    ids: list[int] = []
    mask: list[int] = []
    for index, trace in enumerate(traces):
        if index:
            spliced = _TOKENIZER.encode(_spliced_text(traces[index - 1], trace))
            ids += spliced
            mask += [0] * len(spliced)
        ids += trace.completion_token_ids
        mask += [1] * len(trace.completion_token_ids)
    return ids, mask


def _spliced_text(previous: TokenTrace, current: TokenTrace) -> str:
    """What the template puts between ``previous``'s completion and ``current``'s generation prompt."""
    cut = "" if previous.finish_reason in ("stop", "tool_calls") else IM_END
    last_assistant = max(i for i, m in enumerate(current.messages) if m.get("role") == "assistant")
    tools = "".join(f"{IM_START}tool\n{m.get('content') or ''}{IM_END}" for m in current.messages[last_assistant + 1 :])
    return f"{cut}{tools}{IM_START}assistant\n"


def _weight_version(trace: TokenTrace) -> int | None:
    """The ``weight_version`` of the response the gateway stored with the trace."""
    raw = getattr(trace, "raw_response", None) or {}
    return raw.get("weight_version")


def rows_of_group(group: RolloutGroup, step: int, checks: BatchChecks) -> list[TrainingRow]:
    """Check and assemble every member of ``group``; return rows carrying the member's advantage."""
    rows = []
    for item, advantage in zip(group.items, group.advantages, strict=True):
        traces = (item.result.token_traces if item.result else None) or []
        for row in checks.check_rollout(traces, step):
            if row.response_logprobs is None:
                checks.missing_logprobs += 1
                continue
            rows.append(TrainingRow.of(row, advantage))
    return rows
