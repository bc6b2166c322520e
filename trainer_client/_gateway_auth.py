"""Who may call the token gateway (D100): bearer credentials from the experiment's secrets, checked and sent.

The gateway (:class:`RequireCredentials`, outermost of ``trainer_client.gateway``'s middleware) answers 401 to a request
without the right ``Authorization: Bearer <key>``, before anything is routed, counted or recorded:

- model calls (``/sessions/<sid>/v1/...``, ``/v1/...``) take an experiment's model-call key
  (:attr:`~rollout_contract.credentials.ExperimentSecret.MODEL_KEY`: what agents send as ``_rollout.api_key``, the
  OpenAI SDK's ``api_key``) or its admin key;
- every other route (``/admin/...``, ``/sessions`` and traces, ``/health/workers``) takes the admin key
  (:attr:`~rollout_contract.credentials.ExperimentSecret.ADMIN_KEY`), which only the trainer role may read;
- ``GET /health`` is open (load balancers, readiness checks); it says nothing but ``ok``.

A key that does not match makes the gateway read the secrets again (at most every few seconds), so a rotated secret
is honoured at its first use; the previous value stays valid for a few minutes. The trainer's side
(:class:`GatewayAuth`, an ``httpx.Auth``) sends the admin key and reads it again on a 401.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Generator, Iterable
from typing import Any

import httpx
from starlette.types import ASGIApp, Receive, Scope, Send

from rollout_contract.credentials import (
    SECRET_MIN_REREAD_S,
    CachedSecret,
    ExperimentSecret,
    SecretReadError,
    read_secret,
)

__all__ = ["GatewayAuth", "GatewayKeys", "RequireCredentials", "is_model_call"]

_MODEL_CALL = re.compile(r"^(/sessions/[^/]+)?/v1(/.*)?$")
_OPEN_PATHS = frozenset({"/health"})


def is_model_call(path: str) -> bool:
    """Whether ``path`` is a model call (proxied to the inference servers), not an admin or trace route."""
    return _MODEL_CALL.match(path) is not None


class GatewayKeys:
    """The keys one gateway accepts: the model-call and admin keys of each experiment it serves."""

    def __init__(self, model: Iterable[CachedSecret], admin: Iterable[CachedSecret]) -> None:
        """Accept any of ``model`` on model calls, any of ``admin`` everywhere."""
        self.model, self.admin = tuple(model), tuple(admin)

    @classmethod
    def of_experiments(
        cls, experiments: Iterable[str], secretsmanager: Any, *, min_reread_s: float = SECRET_MIN_REREAD_S
    ) -> GatewayKeys:
        """The keys of ``experiments``, read from Secrets Manager with ``secretsmanager`` (on first use; again on a
        key that matches none, at most every ``min_reread_s``)."""
        names = tuple(experiments)

        def secret(experiment: str, which: ExperimentSecret) -> CachedSecret:
            return CachedSecret(lambda: read_secret(secretsmanager, experiment, which), min_reread_s=min_reread_s)

        return cls(
            [secret(name, ExperimentSecret.MODEL_KEY) for name in names],
            [secret(name, ExperimentSecret.ADMIN_KEY) for name in names],
        )

    async def allows(self, path: str, token: str | None) -> bool:
        """Whether ``token`` may call ``path`` (reading the secrets again once when it matches none)."""
        accepted = (*self.model, *self.admin) if is_model_call(path) else self.admin
        if token is None:
            return False
        if await _any_accepts(accepted, token, lambda secret: secret.value()):
            return True
        return await _any_accepts(accepted, token, _refreshed)


async def _any_accepts(secrets: Iterable[CachedSecret], token: str, load: Callable[[CachedSecret], Any]) -> bool:
    for secret in secrets:
        if secret.fresh_value() is None or load is _refreshed:
            try:
                await asyncio.to_thread(load, secret)
            except SecretReadError:
                continue  # an unreadable secret accepts nothing; the others may
        if secret.accepts(token):
            return True
    return False


def _refreshed(secret: CachedSecret) -> bool:
    return secret.refresh()


class RequireCredentials:
    """ASGI middleware: a request without a key :class:`GatewayKeys` accepts for its path gets 401, untouched."""

    def __init__(self, app: ASGIApp, *, keys: GatewayKeys) -> None:
        self._app = app
        self._keys = keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path", "") in _OPEN_PATHS:
            await self._app(scope, receive, send)
            return
        path = scope.get("path", "")
        if await self._keys.allows(path, _bearer(scope)):
            await self._app(scope, receive, send)
            return
        needed = "the experiment's model-call key (_rollout.api_key)" if is_model_call(path) else "the admin key"
        body = json.dumps(
            {
                "error": f"missing or wrong credential: {path} needs Authorization: Bearer <{needed}>, from the "
                f"experiment's secret {ExperimentSecret.MODEL_KEY.secret_name('<experiment>')!r} or "
                f"{ExperimentSecret.ADMIN_KEY.secret_name('<experiment>')!r}"
            }
        ).encode()
        headers = [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" and token.strip() else None
    return None


class GatewayAuth(httpx.Auth):
    """``httpx`` auth that sends one of the experiment's gateway keys and, on a 401, reads it again and retries once
    (a rotated secret)."""

    def __init__(self, secret: CachedSecret) -> None:
        """Send ``secret``'s value as ``Authorization: Bearer``."""
        self.secret = secret

    @classmethod
    def admin(cls, secretsmanager: Any, experiment: str, *, min_reread_s: float = SECRET_MIN_REREAD_S) -> GatewayAuth:
        """The admin key of ``experiment`` (the trainer's: admin and trace routes, and model calls)."""
        read = lambda: read_secret(secretsmanager, experiment, ExperimentSecret.ADMIN_KEY)  # noqa: E731
        return cls(CachedSecret(read, min_reread_s=min_reread_s))

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        """Add the key; on a 401, read it again and retry once if it changed."""
        request.headers["Authorization"] = f"Bearer {self.secret.value()}"
        response = yield request
        if response.status_code == httpx.codes.UNAUTHORIZED and self.secret.refresh():
            request.headers["Authorization"] = f"Bearer {self.secret.value()}"
            yield request
