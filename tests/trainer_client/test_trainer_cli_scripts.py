"""The ``rollouts`` CLI in scripts: ``--version``, ``--json``, ``-q``, plain progress, a closed pipe, eval's options."""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
import sys

import pytest

from trainer_client import ClientResult, read_journal
from trainer_client._cli import EXIT_BROKEN_PIPE, main
from trainer_client.progress import RolloutProgress


def write_dataset(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def eval_args(descriptor, tmp_path, *extra):
    return ["eval", descriptor.exp_id, "--dataset", str(tmp_path / "in.jsonl"), "--output", str(tmp_path / "out.jsonl"),
            "--poll-wait", "1", *extra]  # fmt: skip


@pytest.fixture(autouse=True)
def _root_logger_level():
    """``-q``/``-v`` set the root logger's level; put it back after each test."""
    level = logging.getLogger().level
    yield
    logging.getLogger().setLevel(level)


def test_version_prints_the_installed_version(capsys):
    with pytest.raises(SystemExit) as caught:
        main(["--version"])
    assert caught.value.code == 0
    assert capsys.readouterr().out.strip() == f"rollouts {importlib.metadata.version('agentcore-rollouts')}"


def test_eval_prints_its_summary_on_success_and_sends_the_model_options(descriptor, backend, tmp_path, capsys):
    # GIVEN two rows and an agent
    write_dataset(tmp_path / "in.jsonl", [{"reward": 1.0}, {"reward": 0.5}])
    backend.serve_in_thread(2)
    # WHEN eval runs them with a model endpoint, a temperature and two more sampling parameters
    model = ["--model-id", "m", "--base-url", "http://model:8000/v1", "--temperature", "0.7", "--sampling-param"]
    code = main(eval_args(descriptor, tmp_path, *model, "top_p=0.9", "--sampling-param", "stop=END"))
    # THEN it succeeds, and stderr (not a terminal here) holds a plain progress line and the summary
    assert code == 0
    err = capsys.readouterr().err
    assert "2/2 rollouts done, 0 failed" in err
    assert "\r" not in err
    assert "rollouts        2 (succeeded 2)" in err
    assert "reward mean     0.750 over 2 succeeded rollouts" in err
    assert "end to end      p50 " in err
    # AND every rollout's _rollout block carries the options
    rollouts = [request.rollout for request in backend.requests]
    assert rollouts == [
        {"model_id": "m", "base_url": "http://model:8000/v1",
         "sampling_params": {"top_p": 0.9, "stop": "END", "temperature": 0.7}},
    ] * 2  # fmt: skip


def test_eval_json_prints_one_summary_object_with_progress_on_stderr_and_quiet_prints_nothing(
    descriptor, backend, tmp_path, capsys
):
    write_dataset(tmp_path / "in.jsonl", [{"reward": 1.0}])
    backend.serve_in_thread(2)
    assert main(eval_args(descriptor, tmp_path, "--json")) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["rollouts"] == 1 and summary["by_status"] == {"succeeded": 1}
    assert summary["reward_mean"] == 1.0 and summary["output"] == str(tmp_path / "out.jsonl")
    assert captured.err == "1/1 rollout done, 0 failed, " + captured.err.partition(", 0 failed, ")[2]  # progress
    assert main(eval_args(descriptor, tmp_path, "-q")) == 0
    assert capsys.readouterr() == ("", "")


def test_eval_resume_collects_the_journal_and_submits_only_the_samples_it_lacks(descriptor, backend, tmp_path, capsys):
    # GIVEN an eval of two rows x 2 samples that recorded its journal
    rows = [{"reward": 1.0, "q": 1}, {"reward": 0.0, "q": 2}]
    write_dataset(tmp_path / "in.jsonl", rows)
    journal = tmp_path / "journal.jsonl"
    backend.serve_in_thread(4)
    assert main(eval_args(descriptor, tmp_path, "--samples", "2", "--journal", str(journal))) == 0
    first_keys = read_journal(journal)
    # WHEN the dataset grows by one row and eval resumes from that journal
    write_dataset(tmp_path / "in.jsonl", [*rows, {"reward": 0.5, "q": 3}])
    capsys.readouterr()
    backend.serve_in_thread(2)
    assert main(eval_args(descriptor, tmp_path, "--samples", "2", "--resume", str(journal))) == 0
    # THEN only the new row's two samples were submitted, the four earlier results were read back, the output
    # holds all six in row order, and the journal records the new ones too
    assert len(backend.requests) == 6
    assert {request.payload["q"] for request in backend.requests[4:]} == {3}
    assert "resuming from" in capsys.readouterr().err
    records = sorted((json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()),
                     key=lambda record: record["index"])  # fmt: skip
    assert [record["index"] for record in records] == list(range(6))
    assert [record["reward"] for record in records] == [1.0, 1.0, 0.0, 0.0, 0.5, 0.5]
    assert read_journal(journal)[:4] == first_keys and len(read_journal(journal)) == 6


def test_results_list_one_line_each_or_jsonl_with_json(descriptor, client, backend, capsys):
    futures = [client.invoke({"reward": 1.0}), client.invoke({"end_as": "agent_error"})]
    backend.serve(2)
    [future.result(5) for future in futures]
    assert main(["results", descriptor.exp_id]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert sorted(line.split()[0] for line in lines) == ["agent_error", "succeeded"]
    assert main(["results", descriptor.exp_id, "--json"]) == 0
    documents = [ClientResult(json.loads(line)) for line in capsys.readouterr().out.splitlines()]
    assert sorted(document.status.value for document in documents) == ["agent_error", "succeeded"]


def test_a_reader_that_goes_away_ends_the_command_quietly(descriptor, client, backend, monkeypatch, capsys):
    # GIVEN stored results and a stdout whose reader has gone (`rollouts results EXP | head -0`)
    futures = [client.invoke({"reward": 1.0}) for _ in range(3)]
    backend.serve(3)
    [future.result(5) for future in futures]
    read_end, write_end = os.pipe()
    os.close(read_end)
    with os.fdopen(write_end, "w", buffering=1) as closed_pipe:
        monkeypatch.setattr(sys, "stdout", closed_pipe)
        # WHEN the command writes its lines THEN it exits with SIGPIPE's status and no traceback
        assert main(["results", descriptor.exp_id]) == EXIT_BROKEN_PIPE
    assert "Traceback" not in capsys.readouterr().err


def test_doctor_json_prints_one_object_per_check(descriptor, capsys):
    main(["doctor", descriptor.exp_id, "--json"])
    checks = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert checks[0]["name"] == "descriptor" and checks[0]["ok"] is True
    assert all(set(check) == {"name", "ok", "detail", "fix", "warn"} for check in checks)


@pytest.mark.parametrize("keep_running", [False, True])
def test_ctrl_c_in_eval_cancels_the_rollouts_still_running_unless_told_to_keep_them(
    descriptor, backend, tmp_path, monkeypatch, capsys, keep_running
):
    # GIVEN an eval of three rows of which one ends, and Ctrl-C pressed as its result comes in
    write_dataset(tmp_path / "in.jsonl", [{"reward": 1.0}, {"reward": 1.0}, {"reward": 1.0}])

    def interrupt(self, item):
        raise KeyboardInterrupt

    monkeypatch.setattr("trainer_client.progress.RolloutProgress.update", interrupt)
    served = backend.serve_in_thread(1)
    # WHEN eval runs
    code = main(eval_args(descriptor, tmp_path, "--journal", str(tmp_path / "j.jsonl"),
                          *(["--keep-running"] if keep_running else [])))  # fmt: skip
    served.join(10)
    # THEN it stops with status 130, and the two rollouts still running get cancel requests (or are left running)
    assert code == 130
    err = capsys.readouterr().err
    if keep_running:
        assert f"rollouts keep running (collect them with --resume {tmp_path / 'j.jsonl'})" in err
        backend.receive(2)
        assert backend.cancels == []
    else:
        assert "cancelled 2 rollouts still running" in err
        backend.receive(4)
        assert len(backend.cancels) == 2
        assert {c.session_id for c in backend.cancels} == {r.session_id for r in backend.requests[1:]}


def test_the_art_evaluation_script_prints_its_json_line_and_no_info_logs(descriptor, backend, tmp_path, capsys,
                                                                          monkeypatch):  # fmt: skip
    from examples.from_art import evaluate

    # GIVEN two rows and an agent
    write_dataset(tmp_path / "in.jsonl", [{"reward": 1.0}, {"reward": 0.0}])
    backend.serve_in_thread(2)
    argv = ["evaluate.py", "--experiment", descriptor.exp_id, "--dataset", str(tmp_path / "in.jsonl")]
    monkeypatch.setattr(sys, "argv", [*argv, "--model_id", "m"])
    # WHEN the script runs as the migration guide runs it
    evaluate.main()
    # THEN stdout is its one JSON line and stderr holds no botocore/httpx INFO lines (was: 11 of them)
    out, err = capsys.readouterr()
    assert json.loads(out)["rollouts"] == 2
    assert "INFO" not in err


def test_an_interrupted_eval_writes_a_row_for_every_rollout_started_and_its_summary_and_resumes(
    descriptor, backend, tmp_path, monkeypatch, capsys
):
    # GIVEN an eval of three rows, --json, Ctrl-C pressed once the first result is in (two still running)
    write_dataset(tmp_path / "in.jsonl", [{"reward": 1.0}, {"reward": 0.5}, {"reward": 0.25}])
    update = RolloutProgress.update

    def interrupt(self, item):
        update(self, item)
        raise KeyboardInterrupt

    monkeypatch.setattr(RolloutProgress, "update", interrupt)
    served = backend.serve_in_thread(1)
    # WHEN eval runs (no --journal given)
    code = main(eval_args(descriptor, tmp_path, "--json"))
    served.join(10)
    # THEN it exits 130 with a row for every rollout it started, the cancelled ones too, and its summary
    assert code == 130
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert sorted(row["status"] for row in rows) == ["cancelled", "cancelled", "succeeded"]
    out, err = capsys.readouterr()
    summary = json.loads(out)
    assert summary["by_status"] == {"succeeded": 1, "cancelled": 2} and summary["interrupted"] is True
    # AND progress went to stderr although --json was given, with how to resume from the default journal
    journal = tmp_path / "out.jsonl.journal"
    assert "1/3 rollouts done" in err and f"--resume {journal}" in err
    # WHEN it is resumed
    monkeypatch.setattr(RolloutProgress, "update", update)
    backend.receive(4)  # the first run's two other dispatch requests and their cancel requests
    served = backend.serve_in_thread(2)
    assert main(eval_args(descriptor, tmp_path, "--resume", str(journal))) == 0
    served.join(10)
    # THEN the first rollout is collected and only the two cancelled samples run again: three rows, all succeeded
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert sorted((row["index"], row["status"]) for row in rows) == [(0, "succeeded"), (1, "succeeded"),
                                                                     (2, "succeeded")]  # fmt: skip
    assert "resuming from" in capsys.readouterr().err
