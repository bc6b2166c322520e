"""The experiment's model-call key for ``_rollout.api_key`` (D100), read with the runtime role's own credentials."""

from __future__ import annotations

import logging
import threading
from typing import Any

from rollout_contract.aws import ClientFactory
from rollout_contract.credentials import CachedSecret, ExperimentSecret, SecretReadError, read_secret
from rollout_contract.ids import InvalidIdError, split_exp_id

__all__ = ["ModelKeys"]

logger = logging.getLogger(__name__)


class ModelKeys:
    """Fills ``_rollout.api_key`` of a dispatched rollout that has none with its experiment's model-call key.

    The token gateway answers 401 to a model call without it. The key is read from Secrets Manager on first use
    (the runtime role may read its own experiment's and no other secret), kept in memory and read again every few
    minutes, so a rotated key reaches the agent without a restart. A key the trainer put in ``_rollout.api_key``
    is kept as it is.
    """

    def __init__(self, client: Any = None) -> None:
        """Read with ``client`` (a Secrets Manager client; built on first use when not given)."""
        self._client = client
        self._secrets: dict[str, CachedSecret] = {}
        self._lock = threading.Lock()

    def fill(self, rollout: dict[str, Any]) -> None:
        """Set ``rollout["api_key"]`` (a ``_rollout`` block) when absent; log why when the key cannot be read."""
        if rollout.get("api_key") or not isinstance(rollout.get("exp_id"), str):
            return
        try:
            experiment, _ = split_exp_id(rollout["exp_id"])
            rollout["api_key"] = self._secret(experiment).value()
        except (InvalidIdError, SecretReadError) as exc:
            logger.warning("model calls of this rollout carry no key, so the token gateway will refuse them: %s", exc)

    def _secret(self, experiment: str) -> CachedSecret:
        with self._lock:
            if self._client is None:
                self._client = ClientFactory().client("secretsmanager")
            client = self._client
            if experiment not in self._secrets:
                self._secrets[experiment] = CachedSecret(
                    lambda: read_secret(client, experiment, ExperimentSecret.MODEL_KEY)
                )
            return self._secrets[experiment]
