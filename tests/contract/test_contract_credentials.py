"""The experiment's secrets (D100): names, reads and the cache that lets a rotated secret in without a restart."""

from __future__ import annotations

import pytest

from rollout_contract.credentials import CachedSecret, ExperimentSecret, SecretReadError, read_secret
from rollout_contract.proof import Provenance, ResultProof, sign


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_each_secret_is_named_by_its_experiment():
    assert ExperimentSecret.RESULT_KEY.secret_name("alpha") == "agentcore-rollouts/alpha/result-key"
    assert len({secret.secret_name("alpha") for secret in ExperimentSecret}) == len(ExperimentSecret)


def test_a_secret_that_cannot_be_read_names_itself_and_what_to_do():
    class Denied:
        def get_secret_value(self, SecretId: str) -> dict:  # noqa: N803 - boto3's keyword
            raise RuntimeError("AccessDenied")

    with pytest.raises(SecretReadError, match=r"agentcore-rollouts/alpha/model-key.*AccessDenied.*GetSecretValue"):
        read_secret(Denied(), "alpha", ExperimentSecret.MODEL_KEY)


def test_the_cache_reads_rarely_and_a_rotation_is_let_in_with_the_old_value_kept_a_while():
    # GIVEN a secret read through the cache
    values, reads, clock = ["one"], [], Clock()

    def read() -> str:
        reads.append(clock.now)
        return values[-1]

    secret = CachedSecret(read, max_age_s=300, min_reread_s=5, clock=clock)
    assert secret.value() == "one" and secret.value() == "one" and len(reads) == 1
    # WHEN it is rotated
    values.append("two")
    # THEN a refresh right after a read does not read (a flood of wrong keys is no flood of reads) ...
    assert not secret.refresh() and not secret.accepts("two")
    # ... one 5 s later does, and the new value is accepted, the old one too for max_age_s
    clock.now = 6
    assert secret.refresh() and secret.accepts("two") and secret.accepts("one")
    clock.now = 6 + 301
    assert secret.value() == "two" and not secret.accepts("one") and not secret.accepts("")


def test_a_proof_binds_the_session_the_bytes_and_the_experiment_key():
    proof, body = ResultProof("key-a"), b'{"rewards": 1.0}'
    metadata = proof.metadata("s-1", body)
    assert proof.check("s-1", body, metadata) is Provenance.PROVEN
    assert proof.check("s-2", body, metadata) is Provenance.FORGED
    assert proof.check("s-1", body + b" ", metadata) is Provenance.FORGED
    assert ResultProof("key-b").check("s-1", body, metadata) is Provenance.FORGED
    assert proof.check("s-1", body, {}) is Provenance.UNPROVEN
    # AND the session key the agent holds signs what the reader checks, and is not the experiment key
    assert sign(proof.session_key("s-1"), "s-1", body) == next(iter(metadata.values()))
    assert proof.session_key("s-1") != proof.session_key("s-2") and "key-a" not in proof.session_key("s-1")
