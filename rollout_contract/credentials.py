"""The experiment's secrets in Secrets Manager (D100): one definition for the CDK app, the local stack and readers.

Each is created at deploy time with a random value (the local stack creates them in moto) and read by name:

- :attr:`ExperimentSecret.RESULT_KEY`: the key results are proven with (``rollout_contract.proof``); the
  dispatcher, the sweeper and the trainer read it, the agent's runtime role may not.
- :attr:`ExperimentSecret.MODEL_KEY`: the credential of model calls through the token gateway
  (``Authorization: Bearer``, the OpenAI SDK's ``api_key``); the runtime role reads it (only its own experiment's),
  the trainer role too (its gateway checks it).
- :attr:`ExperimentSecret.ADMIN_KEY`: the credential of the gateway's admin and trace routes; the trainer role only.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections.abc import Callable
from enum import StrEnum
from typing import Any

from rollout_contract.naming import PROJECT

__all__ = ["CachedSecret", "ExperimentSecret", "SecretReadError", "new_secret_value", "read_secret"]

#: How long a value read is used before it is read again (a rotation reaches every reader within this).
SECRET_MAX_AGE_S = 300.0
#: Shortest time between two reads a refused credential may cause (a flood of wrong keys is not a flood of reads).
SECRET_MIN_REREAD_S = 5.0


class ExperimentSecret(StrEnum):
    """The secrets every experiment has, by the last part of their name."""

    RESULT_KEY = "result-key"
    MODEL_KEY = "model-key"
    ADMIN_KEY = "gateway-admin-key"

    def secret_name(self, experiment: str) -> str:
        """The Secrets Manager name of this secret of ``experiment``."""
        return f"{PROJECT}/{experiment}/{self.value}"


class SecretReadError(RuntimeError):
    """An experiment's secret could not be read (the message names it and says what to do)."""


def new_secret_value() -> str:
    """A fresh secret value (256 random bits, hex), as the local stack creates each secret."""
    return secrets.token_hex(32)


def read_secret(client: Any, experiment: str, secret: ExperimentSecret) -> str:
    """The current value of ``experiment``'s ``secret``, read with a Secrets Manager ``client``.

    Raises:
        SecretReadError: not created, empty, or the caller may not read it.
    """
    name = secret.secret_name(experiment)
    try:
        value = client.get_secret_value(SecretId=name).get("SecretString")
    except Exception as exc:  # botocore's errors: the message carries AWS's words
        raise SecretReadError(
            f"cannot read the secret {name!r} ({exc}): deploy the experiment again (its stack creates it) and give "
            "this role secretsmanager:GetSecretValue on it"
        ) from exc
    if not value:
        raise SecretReadError(f"the secret {name!r} holds no string; it must hold a random string (its stack sets one)")
    return str(value)


class CachedSecret:
    """One secret's value, read on first use, again after :data:`SECRET_MAX_AGE_S`, and on demand (:meth:`refresh`)
    at most every :data:`SECRET_MIN_REREAD_S`: a rotation (``put-secret-value``) needs no redeploy or restart.

    After a change the previous value is still accepted (:meth:`accepts`) for ``max_age_s``, so callers that read the
    old value shortly before keep working until they read again.
    """

    def __init__(
        self,
        read: Callable[[], str],
        *,
        max_age_s: float = SECRET_MAX_AGE_S,
        min_reread_s: float = SECRET_MIN_REREAD_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``read`` returns the current value (e.g. :func:`read_secret` of one secret)."""
        self._read = read
        self._max_age_s = max_age_s
        self._min_reread_s = min_reread_s
        self._clock = clock
        self._lock = threading.Lock()
        self._value: str | None = None
        self._previous: str | None = None
        self._read_at = self._changed_at = float("-inf")

    def value(self) -> str:
        """The current value (read now if never read or older than ``max_age_s``).

        Raises:
            SecretReadError: it cannot be read.
        """
        with self._lock:
            if self._value is None or self._clock() - self._read_at >= self._max_age_s:
                self._load()
            assert self._value is not None
            return self._value

    def fresh_value(self) -> str | None:
        """The current value if it needs no read (for callers that must not block), else ``None``."""
        with self._lock:
            fresh = self._value is not None and self._clock() - self._read_at < self._max_age_s
            return self._value if fresh else None

    def refresh(self) -> bool:
        """Read the value again unless it was read within ``min_reread_s``; whether it changed.

        Raises:
            SecretReadError: it cannot be read.
        """
        with self._lock:
            if self._value is not None and self._clock() - self._read_at < self._min_reread_s:
                return False
            before = self._value
            self._load()
            return self._value != before

    def accepts(self, candidate: str) -> bool:
        """Whether ``candidate`` is the current value, or the previous one within ``max_age_s`` of the change
        (compared in constant time). Call :meth:`value` first so that the value is current."""
        with self._lock:
            current, previous = self._value, self._previous
            previous_ok = previous is not None and self._clock() - self._changed_at < self._max_age_s
        known = [value for value in (current, previous if previous_ok else None) if value]
        return any(hmac.compare_digest(candidate.encode(), value.encode()) for value in known)

    def _load(self) -> None:
        value = self._read()
        now = self._clock()
        if self._value is not None and value != self._value:
            self._previous, self._changed_at = self._value, now
        self._value, self._read_at = value, now
