"""The agent's proof that it wrote its result (D100): the session key is used, never shown to the handler or stored."""

from __future__ import annotations

from typing import Any

from agent_app_support import BUCKET, invoke, new_session, result_key_of, rollout_block, wait_until_healthy

from rollout_contract.proof import PROOF_METADATA, Provenance, ResultProof
from rollout_contract.results import PROOF_KEY_FIELD, REDACTED

PROOF = ResultProof("experiment-key-of-the-test")


def stored(s3: Any, session_id: str) -> tuple[bytes, dict[str, str]]:
    obj = s3.get_object(Bucket=BUCKET, Key=result_key_of(session_id))
    return obj["Body"].read(), obj["Metadata"]


def test_result_is_signed_with_the_session_key_the_handler_never_sees(make_client, s3):
    # GIVEN a handler that keeps the payload it was given
    seen: list[dict[str, Any]] = []
    client = make_client(lambda payload: seen.append(payload) or {"rewards": 0.5})
    session_id = new_session()
    session_key = PROOF.session_key(session_id)

    # WHEN the dispatcher's invoke carries the session's proof key
    response = invoke(client, {"x": 1, "_rollout": rollout_block(**{PROOF_KEY_FIELD: session_key})}, session_id)
    wait_until_healthy(client)

    # THEN the stored result proves it came from the session's agent
    assert response.status_code == 200
    body, metadata = stored(s3, session_id)
    assert PROOF.check(session_id, body, metadata) is Provenance.PROVEN
    # AND neither the handler's payload nor the stored document holds the key
    assert PROOF_KEY_FIELD not in seen[0]["_rollout"]
    assert session_key.encode() not in body
    # AND the proof is bound to the session: the same bytes do not prove another session's result
    assert PROOF.check(new_session(), body, metadata) is Provenance.FORGED


def test_result_without_a_proof_key_is_stored_unproven(make_client, s3):
    # GIVEN an agent invoked without a proof key (called directly, not by the dispatcher)
    client = make_client(lambda payload: {"rewards": 1.0})
    session_id = new_session()

    # WHEN it stores its result
    invoke(client, {"_rollout": rollout_block()}, session_id)
    wait_until_healthy(client)

    # THEN the result carries no proof
    body, metadata = stored(s3, session_id)
    assert PROOF_METADATA not in metadata
    assert PROOF.check(session_id, body, metadata) is Provenance.UNPROVEN


def test_save_result_of_a_running_session_is_signed_and_a_passed_payload_redacts_the_key(make_client, s3):
    # GIVEN a handler that stores its result itself with ART's save_result, passing the payload it got
    session_id = new_session()
    block = rollout_block(**{PROOF_KEY_FIELD: PROOF.session_key(session_id)})
    apps: list[Any] = []

    def handler(payload):
        rollout = payload["_rollout"]
        apps[0].save_result({"rewards": 1.0}, rollout, result_key_of(session_id), {**payload, "_rollout": block})
        return {"rewards": 1.0}

    client = make_client(handler)
    apps.append(client.app)

    # WHEN it runs
    invoke(client, {"_rollout": dict(block)}, session_id)
    wait_until_healthy(client)

    # THEN save_result's object is signed with the session's key and its stored payload hides the key
    body, metadata = stored(s3, session_id)
    assert PROOF.check(session_id, body, metadata) is Provenance.PROVEN
    assert f'"{PROOF_KEY_FIELD}": "{REDACTED}"'.encode() in body


def test_a_proof_key_that_is_not_a_string_is_refused(make_client, s3):
    client = make_client(lambda payload: {"rewards": 1.0})
    response = invoke(client, {"_rollout": rollout_block(**{PROOF_KEY_FIELD: 7})}, new_session())
    assert response.status_code == 400
    assert PROOF_KEY_FIELD in response.text
