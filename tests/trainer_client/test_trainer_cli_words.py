"""One set of words across the ``rollouts`` commands: plural forms, counts as integers, the command's own usage."""

from __future__ import annotations

import io

import pytest

from rollout_contract import ErrorInfo, ResultKey, RolloutResult, Status
from trainer_client import BatchItem, ClientResult
from trainer_client._cli import main
from trainer_client._top import Snapshot, render
from trainer_client.progress import BatchSummary, plural


def failed_item(index: int) -> BatchItem:
    key = ResultKey("exp-test", f"q{index}", f"{index:036d}")
    result = RolloutResult.terminal(
        Status.AGENT_ERROR, key=key, s3_bucket="b", error=ErrorInfo(type="ValueError", message="boom")
    )
    return BatchItem(
        success=False, result=ClientResult(result), error="AgentError: boom", index=index, elapsed=1.0,
        session_id=key.session_id, input_id=key.input_id,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("failed", "heading"),
    [(6, "6 of 6 rollouts failed; the first 5:"), (2, "2 of 6 rollouts failed:"), (1, "1 of 1 rollout failed:")],
)
def test_the_failure_heading_says_how_many_reasons_follow(failed, heading):
    # GIVEN a batch in which `failed` rollouts failed
    summary = BatchSummary(total=max(failed, 6 if failed != 1 else 1))
    for index in range(failed):
        summary.add(failed_item(index))
    summary.by_status["succeeded"] += summary.total - failed
    # WHEN the failures are listed, THEN the heading counts right and says how many of them follow
    lines = summary.failure_lines(lambda item: f"row {item.index + 1}")
    assert lines[0] == heading and len(lines) == 1 + min(failed, 5)


def test_plural_forms():
    assert [plural(n, "rollout") for n in (0, 1, 2)] == ["0 rollouts", "1 rollout", "2 rollouts"]
    assert plural(2, "sandbox", "sandboxes") == "2 sandboxes"
    summary = BatchSummary(total=1)
    summary.by_status["succeeded"] += 1
    summary.rewards.append(1.0)
    assert "reward mean     1.000 over 1 succeeded rollout" in summary.lines()


def test_status_counts_sessions_as_integers():
    snapshot = Snapshot(
        exp_id="e", at=0.0, in_flight={"running": 52}, waiting=0, sessions=52, session_budget=900,
        account_sessions=None, invokes_per_s=1.5, tps_limit=25.0, completions_per_s=0.0, completed={},
        duration_p50_s=None, duration_p99_s=None, queues={}, dead_letters={}, alarms={},
    )  # fmt: skip
    out = io.StringIO()
    render(snapshot, out)
    assert "sessions    52 of 900 (6%)" in out.getvalue() and "invokes     1.50/s of 25/s (6%)" in out.getvalue()


def test_a_missing_dataset_file_prints_evals_usage_not_the_top_level_one(tmp_path, capsys):
    with pytest.raises(SystemExit) as caught:
        main(["eval", "exp-test", "--dataset", str(tmp_path / "none.jsonl"), "--output", str(tmp_path / "o.jsonl")])
    err = capsys.readouterr().err
    assert caught.value.code == 2
    assert err.startswith("usage: rollouts eval ") and "rollouts eval: error: " in err and "none.jsonl" in err
