"""The trainer accepts a result only if it proves the rollout's agent wrote it (D100)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from trainer_support import BUCKET, EXPERIMENT_KEY, FAST_POLL, aws, publish, put_result, scripted

from rollout_contract import RolloutResult, Status
from rollout_contract.proof import PROOF_METADATA, RESULT_NOT_FROM_AGENT, Provenance, ResultProof, UnprovenResults
from rollout_contract.sessions import SessionState
from trainer_client import RolloutClient
from trainer_client._cli import main as rollouts
from trainer_client._stored import ResultReader


def forged_result_ends_as_agent_error(result: RolloutResult, provenance: Provenance) -> None:
    assert result.status is Status.AGENT_ERROR
    assert result.reward is None
    assert result.error.type == RESULT_NOT_FROM_AGENT
    assert "result not written by the rollout's agent" in result.error.message
    assert result.provenance == provenance


def test_a_signed_result_is_accepted_and_marked_proven(client, backend):
    future = client.invoke({"prompt": "6*7"}, input_id="q1")
    backend.serve(1)
    result = future.result(timeout=5)
    assert (result.status, result.reward, result.provenance) == (Status.SUCCEEDED, 1.0, Provenance.PROVEN)


def test_an_unsigned_result_with_reward_one_ends_as_agent_error_naming_it(client, backend):
    # GIVEN a submitted rollout
    future = client.invoke({"prompt": "6*7"}, input_id="q1")
    (request,) = backend.receive(1)
    backend.record(request, SessionState.RUNNING)

    # WHEN something without the session key (model-written code with the runtime role's credentials) stores a
    # success with reward 1.0 at its key first
    put_result(scripted(request), signed=False)

    # THEN the rollout ends agent_error saying the result was not written by its agent; the reward is not read
    forged_result_ends_as_agent_error(future.result(timeout=5), Provenance.UNPROVEN)


def test_a_forged_object_that_is_no_result_document_still_ends_the_rollout_naming_it(client, backend):
    # GIVEN a submitted rollout, and at its key a bare {"rewards": 1.0} (no ids: what code with the credentials writes)
    future = client.invoke({"prompt": "6*7"}, input_id="q1")
    (request,) = backend.receive(1)
    backend.s3.put_object(Bucket=BUCKET, Key=str(request.key), Body=b'{"rewards": 1.0, "status_code": 200}')
    # THEN the rollout ends agent_error naming it, not an unreadable result
    forged_result_ends_as_agent_error(future.result(timeout=5), Provenance.UNPROVEN)


def test_a_proof_for_another_session_or_other_bytes_is_forged(client, backend):
    # GIVEN two rollouts; the first one's signed result is copied to the second one's key
    first, second = (client.invoke({"prompt": "p"}, input_id="q1") for _ in range(2))
    requests = backend.receive(2)
    by_session = {request.session_id: request for request in requests}
    honest = scripted(by_session[first.session_id])
    put_result(honest)
    copied = scripted(by_session[second.session_id])
    body = copied.to_json_bytes()
    proof = ResultProof(EXPERIMENT_KEY).metadata(first.session_id, body)
    backend.s3.put_object(Bucket=copied.s3_bucket, Key=copied.result_key, Body=body, Metadata=proof)

    # THEN the first is accepted and the second, signed for another session, is refused as forged
    assert first.result(timeout=5).provenance == Provenance.PROVEN
    forged_result_ends_as_agent_error(second.result(timeout=5), Provenance.FORGED)


def test_accepting_unproven_results_keeps_an_art_agents_result_marked_unproven(descriptor, backend):
    # GIVEN a client that accepts unproven results (an experiment whose agent is ART's own, which signs nothing)
    with RolloutClient.from_descriptor(descriptor, poll=FAST_POLL, unproven_results="accept") as client:
        future = client.invoke({"prompt": "6*7"}, input_id="q1")
        (request,) = backend.receive(1)
        put_result(scripted(request), signed=False)

        # THEN its result is used, marked unproven
        result = future.result(timeout=5)
        assert (result.status, result.reward, result.provenance) == (Status.SUCCEEDED, 1.0, Provenance.UNPROVEN)

        # AND a forged proof is refused even so
        forged = client.invoke({"prompt": "6*7"}, input_id="q2")
        (request,) = backend.receive(1)
        result = scripted(request)
        backend.s3.put_object(
            Bucket=result.s3_bucket, Key=result.result_key, Body=result.to_json_bytes(), Metadata={PROOF_METADATA: "0"}
        )
        forged_result_ends_as_agent_error(forged.result(timeout=5), Provenance.FORGED)


def test_an_experiment_that_accepts_unproven_results_says_so_to_every_client_and_view(descriptor, backend, capsys):
    # GIVEN an experiment deployed with -c unproven_results=accept (its agent is ART's own) and an unsigned success
    publish(descriptor, unproven_results=UnprovenResults.ACCEPT)
    with RolloutClient.for_experiment(descriptor.exp_id, poll=FAST_POLL) as client:
        future = client.invoke({"prompt": "6*7"}, input_id="q1")
        (request,) = backend.receive(1)
        put_result(scripted(request), signed=False)
        # THEN a client that names no setting takes it, marked unproven
        result = future.result(timeout=5)
        assert (result.status, result.reward, result.provenance) == (Status.SUCCEEDED, 1.0, Provenance.UNPROVEN)
    # AND the CLI's views read it as the agent stored it
    assert rollouts(["results", descriptor.exp_id, "--json"]) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert (row["_agentcore_rollouts"]["status"], row["rewards"]) == ("succeeded", [1.0])
    # AND a client may still refuse it
    with RolloutClient.for_experiment(descriptor.exp_id, unproven_results="reject") as strict:
        (attached,) = strict.attach([future.result_key])
        forged_result_ends_as_agent_error(attached.result(timeout=5), Provenance.UNPROVEN)


def test_a_result_read_before_its_metadata_landed_is_read_again_not_refused(client, descriptor, backend):
    # GIVEN a signed result, read the first time as moto's S3 shows it while its PUT is under way: without metadata
    future = client.invoke({"prompt": "6*7"}, input_id="q1")
    (request,) = backend.receive(1)
    put_result(scripted(request))
    s3, reads = aws("s3"), []

    def get_object(**kwargs):
        stored = s3.get_object(**kwargs)
        reads.append(kwargs["Key"])
        return {**stored, "Metadata": {}} if len(reads) == 1 else stored

    reader = ResultReader(SimpleNamespace(get_object=get_object), aws("secretsmanager"), BUCKET, descriptor.exp_id)
    # WHEN the trainer reads it THEN it reads it once more and accepts it, proven
    result = reader.read(future.result_key)
    assert (result.status, result.provenance, reads) == (Status.SUCCEEDED, Provenance.PROVEN, [future.result_key] * 2)


def test_an_unknown_unproven_setting_is_refused_naming_the_choices(descriptor):
    with pytest.raises(ValueError, match="unproven_results='maybe' is not one of 'reject', 'accept'"):
        RolloutClient.from_descriptor(descriptor, unproven_results="maybe")
