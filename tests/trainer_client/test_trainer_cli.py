"""The ``rollouts`` CLI: eval, status, results, local-stack commands, and its errors."""

from __future__ import annotations

import json
import sys
import types

import pytest

from trainer_client import read_journal
from trainer_client._cli import build_parser, main


def write_dataset(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_eval_runs_a_dataset_and_writes_one_result_per_row(descriptor, backend, tmp_path, capsys):
    # GIVEN a dataset of four prompts, one of which fails in the agent, and an agent thread
    dataset = write_dataset(
        tmp_path / "in.jsonl",
        [
            {"id": "a", "reward": 1.0},
            {"id": "b", "reward": 0.0},
            {"id": "c", "end_as": "agent_error"},
            {"id": "d", "reward": 1.0},
        ],
    )
    backend.serve_in_thread(4)

    # WHEN `rollouts eval` runs it
    code = main(
        [
            "eval",
            descriptor.exp_id,
            "--dataset",
            str(dataset),
            "--output",
            str(tmp_path / "out.jsonl"),
            "--concurrency",
            "2",
            "--input-id-field",
            "id",
            "--journal",
            str(tmp_path / "j.jsonl"),
            "--poll-wait",
            "1",
        ]
    )

    # THEN every row has a result line, the exit status reports the failure, the bar shows the counts
    records = sorted(
        (json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()), key=lambda r: r["index"]
    )
    assert [(r["input_id"], r["status"], r["success"]) for r in records] == [
        ("a", "succeeded", True),
        ("b", "succeeded", True),
        ("c", "agent_error", False),
        ("d", "succeeded", True),
    ]
    assert code == 1
    err = capsys.readouterr().err
    assert "4/4" in err
    # AND the failure's reason is printed, not only the count
    assert "1 of 4 rollouts failed" in err
    assert "row 3: agent_error: ValueError: boom" in err
    assert len(read_journal(tmp_path / "j.jsonl")) == 4


def test_results_exports_stored_results_filtered_by_status(descriptor, client, backend, tmp_path):
    # GIVEN three finished rollouts, one timed out
    futures = [client.invoke(payload) for payload in ({"reward": 1.0}, {"end_as": "timed_out"}, {"reward": 0.0})]
    backend.serve(3)
    [future.result(5) for future in futures]

    # WHEN all, then only successful, results are exported
    main(["results", descriptor.exp_id, "--output", str(tmp_path / "all.jsonl"), "--poll-wait", "1"])
    main(["results", descriptor.exp_id, "--status", "succeeded", "--output", str(tmp_path / "ok.jsonl")])

    # THEN each file holds the matching results
    assert len((tmp_path / "all.jsonl").read_text().splitlines()) == 3
    ok = [json.loads(line) for line in (tmp_path / "ok.jsonl").read_text().splitlines()]
    assert sorted(r["rewards"][0] for r in ok) == [0.0, 1.0]


def test_missing_arguments_are_named(capsys):
    with pytest.raises(SystemExit) as caught:
        main(["eval", "exp-test"])
    assert caught.value.code == 2
    assert "--dataset" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[1, 2]", "is a JSON list; give one JSON object"),
        ('{"q": NaN}', "holds NaN, which is not JSON; use a number or null"),
        ('{"q": ', "is not JSON (Expecting value); give one JSON object"),
    ],
)
def test_a_canary_payload_that_is_not_one_json_object_is_refused_before_any_check(tmp_path, capsys, content, message):
    # GIVEN a canary payload file that is not one JSON object
    canary = tmp_path / "canary.json"
    canary.write_text(content)
    # WHEN the doctor is asked to run it THEN the command line is refused, naming the file and the fix
    with pytest.raises(SystemExit) as caught:
        main(["doctor", "exp-test", "--canary", str(canary)])
    assert caught.value.code == 2
    assert f"canary payload {canary} {message}" in capsys.readouterr().err


def test_a_dataset_line_that_is_not_an_object_is_named_with_its_line(descriptor, tmp_path, capsys):
    dataset = tmp_path / "in.jsonl"
    dataset.write_text('{"ok": 1}\n[1, 2]\n')
    with pytest.raises(SystemExit):
        main(["eval", descriptor.exp_id, "--dataset", str(dataset), "--output", str(tmp_path / "o.jsonl")])
    assert f"{dataset}:2 is a JSON list" in capsys.readouterr().err


def test_an_unknown_experiment_says_how_to_create_it(capsys):
    assert main(["status", "missing-exp"]) == 1
    err = capsys.readouterr().err
    assert "experiment 'missing-exp' not found" in err and "rollouts local up" in err


def test_local_stack_commands_are_mounted_when_the_package_provides_them(monkeypatch):
    # GIVEN a local stack package with add_commands (given the example math agent's demo to host)
    def add_commands(subparsers, demo):
        assert demo.agent.name == "math_agent"
        subparsers.add_parser("local").set_defaults(func=lambda args: 7)

    monkeypatch.setitem(sys.modules, "local_stack.cli", types.SimpleNamespace(add_commands=add_commands))

    # WHEN the CLI is built THEN its commands run through `rollouts`
    assert build_parser().parse_args(["local"]).func(None) == 7
    assert main(["local"]) == 7
