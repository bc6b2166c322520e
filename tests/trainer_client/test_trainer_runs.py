"""Runs within an experiment: exp_id ``experiment/run``, per-run results and status, no deploy to start one."""

from __future__ import annotations

import json
from collections import Counter

import boto3
import pytest
from trainer_support import BUCKET, FAST_POLL, aws

from rollout_contract import InvalidIdError, parse_result_key
from rollout_contract.sessions import ATTR_DEADLINE_AT, ATTR_EXP_ID, ATTR_INFLIGHT, ATTR_SESSION_ID, INFLIGHT_MARK
from trainer_client import AwsClients, RolloutClient
from trainer_client._cli import main


def _in_flight(descriptor, exp_id: str, session_id: str) -> None:
    aws("dynamodb").put_item(
        TableName=descriptor.sessions_table,
        Item={
            ATTR_SESSION_ID: {"S": session_id},
            ATTR_EXP_ID: {"S": exp_id},
            ATTR_INFLIGHT: {"S": INFLIGHT_MARK},
            ATTR_DEADLINE_AT: {"N": "1"},
        },
    )


def test_runs_of_one_experiment_keep_their_results_apart_under_arts_key_layout(descriptor, backend):
    # GIVEN two runs of one experiment and the experiment itself, each with its own client (no deploy between)
    exp = descriptor.exp_id
    with (
        RolloutClient.for_experiment(exp, run="qwen3_gsm8k", poll=FAST_POLL) as run_a,
        RolloutClient.for_experiment(exp, run="llama/lr-3e-6", poll=FAST_POLL) as run_b,
        RolloutClient.for_experiment(exp, poll=FAST_POLL) as whole,
    ):
        # WHEN each submits rollouts and the pipeline completes them (events all arrive on the one queue)
        futures = {
            "a": [run_a.invoke({"reward": 1.0}, input_id="q1") for _ in range(2)],
            "b": [run_b.invoke({"reward": 0.0}, input_id="q1")],
            "whole": [whole.invoke({"reward": 0.5}, input_id="q1")],
        }
        backend.serve(4)
        results = {name: [f.result(10) for f in fs] for name, fs in futures.items()}

        # THEN each future got its own rollout's result, stored under ART's {exp_id}/{input_id}/{session_id}.json
        assert [r.exp_id for r in results["a"]] == [f"{exp}/qwen3_gsm8k"] * 2
        assert results["b"][0].result_key == f"{exp}/llama/lr-3e-6/q1/{futures['b'][0].session_id}.json"
        assert parse_result_key(results["b"][0].result_key).experiment == exp
        # AND each run's results are its own; the experiment's view holds every run
        assert sorted(r.session_id for r in run_a.results()) == sorted(f.session_id for f in futures["a"])
        assert [r.reward for r in run_b.results()] == [0.0]
        assert len(list(whole.results())) == 4


def test_status_of_a_run_counts_its_rollouts_in_flight_and_its_results_only(descriptor, backend):
    # GIVEN rollouts in flight in two runs (one nested under the other) and the experiment itself
    exp = descriptor.exp_id
    _in_flight(descriptor, f"{exp}/r1", "a" * 36)
    _in_flight(descriptor, f"{exp}/r1/seed-2", "b" * 36)
    _in_flight(descriptor, f"{exp}/r10", "c" * 36)
    _in_flight(descriptor, exp, "d" * 36)
    with RolloutClient.for_experiment(exp, run="r1", poll=FAST_POLL) as client:
        future = client.invoke({"reward": 0.25}, input_id="q")
        backend.serve(1)
        future.result(10)
        # WHEN its status is read, with its newest result
        status = client.status(recent=1)
    with RolloutClient.for_experiment(exp, poll=FAST_POLL) as whole:
        everything = whole.status()

    # THEN the run counts itself and the run under it, not 'r10' (a prefix of the name is not a run of it)
    assert (status.exp_id, status.rollouts_in_flight) == (f"{exp}/r1", 2)
    assert [r.session_id for r in status.recent] == [future.session_id]
    assert everything.rollouts_in_flight == 4


def test_the_cli_takes_a_run(descriptor, backend, tmp_path, capsys):
    # GIVEN one finished rollout in run 'nightly' and one of the experiment itself
    exp = descriptor.exp_id
    with (
        RolloutClient.for_experiment(exp, run="nightly", poll=FAST_POLL) as nightly,
        RolloutClient.for_experiment(exp, poll=FAST_POLL) as whole,
    ):
        kept = nightly.invoke({"reward": 1.0}, input_id="q")
        whole.invoke({"reward": 0.0}, input_id="q")
        backend.serve(2)
        kept.result(10)

    # WHEN `rollouts results EXP --run nightly` and `rollouts status EXP --run nightly` run
    assert main(["results", exp, "--run", "nightly", "--output", str(tmp_path / "out.jsonl")]) == 0
    assert main(["status", exp, "--run", "nightly", "--poll-wait", "1"]) == 0

    # THEN only the run's result is exported, and the status names the run
    lines = (tmp_path / "out.jsonl").read_text().splitlines()
    assert [json.loads(line)["result_key"] for line in lines] == [kept.result_key]
    out = capsys.readouterr().out
    assert out.startswith(f"{exp}/nightly at ")


def test_an_exp_id_given_as_the_experiment_name_is_refused_naming_both_parts(descriptor):
    with pytest.raises(InvalidIdError, match=r"for_experiment\('exp-test', run='r1'\)"):
        RolloutClient.for_experiment(f"{descriptor.exp_id}/r1")


def test_arts_signature_takes_the_run_in_exp_id(descriptor, backend):
    # ART's RolloutClient(agent_runtime_arn, s3_bucket, exp_id) with exp_id 'experiment/run'
    with RolloutClient(
        descriptor.runtime_arn,
        BUCKET,
        f"{descriptor.exp_id}/runs_qwen3",
        dispatch_queue_url=descriptor.dispatch_queue_url,
        completion_queue_url=descriptor.completion_queue_url,
        poll=FAST_POLL,
    ) as client:
        assert (client.experiment, client.run) == (descriptor.exp_id, "runs_qwen3")
        future = client.invoke({"reward": 1.0}, input_id="q")
        backend.serve(1)
        assert future.result(10).exp_id == f"{descriptor.exp_id}/runs_qwen3"


def test_starting_a_run_costs_one_descriptor_read_and_no_other_aws_call(descriptor):
    # GIVEN clients whose every AWS call is counted
    calls: Counter[str] = Counter()

    def count(model, **_):
        calls[f"{model.service_model.service_name}:{model.name}"] += 1

    session = boto3.session.Session()
    ssm = session.client("ssm")
    clients = AwsClients(
        sqs=session.client("sqs"),
        s3=session.client("s3"),
        dynamodb=session.client("dynamodb"),
        secretsmanager=session.client("secretsmanager"),  # the experiment key is read at the first result, not here
    )
    for client in (ssm, *clients):
        client.meta.events.register("before-call", count)

    # WHEN a new run starts: a client for it, before its first rollout
    with RolloutClient.for_experiment(descriptor.exp_id, run="fresh-run", ssm=ssm, clients=clients, poll=FAST_POLL):
        started = dict(calls)

    # THEN that was the descriptor read alone: no deploy, no queue or rule to create
    assert started == {"ssm:GetParameter": 1}


def test_status_lists_no_result_unless_asked_for_the_newest(client, backend):
    # GIVEN a finished rollout whose event the poller has deleted (it resolves the future first), and the client's
    # S3 calls counted
    future = client.invoke({"reward": 1.0}, input_id="q")
    backend.serve(1)
    future.result(10)
    assert backend.wait_for_depth(0) == 0
    s3_calls: Counter[str] = Counter()
    client._clients.s3.meta.events.register("before-call", lambda model, **_: s3_calls.update([model.name]))

    # WHEN the status is read as is, then with its newest result
    plain = client.status()
    assert s3_calls == Counter()
    newest = client.status(recent=1)

    # THEN only the second listed the result prefix (a cost that grows with the run)
    assert plain.recent == [] and plain.queues == newest.queues
    assert [r.session_id for r in newest.recent] == [future.session_id]
    assert s3_calls == Counter({"ListObjectsV2": 1, "GetObject": 1})
