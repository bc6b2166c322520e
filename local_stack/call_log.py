"""The local stack's call recorder: every signed AWS request, by whose access key, as IAM authorizes it.

The moto server (:func:`record_moto_calls`) and the ACR emulator (:class:`RecordingMiddleware`) append one JSON
line per signed request to the file named by :data:`CALL_LOG_ENV`: the access key, the operation, the HTTP
status and the request's authorizations (:func:`local_stack.aws_requests.describe`). Each component of the
stack signs with its own key (:data:`local_stack.moto_server.LOCAL_ACCESS_KEYS`), so :func:`read_calls` tells
whose call each one was. Unsigned requests (moto's and the emulator's admin APIs) are not AWS calls and are not
recorded. ``StackSettings(record_calls=True)`` turns it on; off, the servers do no extra work.
"""

from __future__ import annotations

import io
import json
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from local_stack.aws_requests import Authorization, Described, HttpRequest, describe, signer
from local_stack.moto_server import LOCAL_ACCESS_KEYS, LOCAL_ACCOUNT_ID

__all__ = ["CALL_LOG_ENV", "CallLog", "RecordedCall", "RecordingMiddleware", "read_calls", "record_moto_calls"]

#: The file a server appends its calls to (unset: no recording).
CALL_LOG_ENV = "ROLLOUTS_CALL_LOG"
_COMPONENT_OF_KEY = {key: component for component, key in LOCAL_ACCESS_KEYS.items()}
#: Services whose request bodies hold the parameters IAM looks at (S3's bodies are objects: never read).
_BODY_UNNEEDED = ("s3", "bedrock-agentcore")


@dataclass(frozen=True)
class RecordedCall:
    """One recorded request: whose (``component``, or the raw key when it is no component's), what, its status."""

    component: str
    service: str
    operation: str
    status: int
    authorizations: tuple[Authorization, ...]


class CallLog:
    """Appends described requests to a JSON-lines file, one write per line, safe across threads."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("a", buffering=1)
        self._lock = threading.Lock()

    def write(self, described: Described, status: int) -> None:
        """Append one request and the status the server answered."""
        line = json.dumps(
            {
                "at": time.time(),
                "key": described.access_key,
                "service": described.service,
                "operation": described.operation,
                "status": status,
                "authorizations": [
                    {
                        "action": a.action,
                        "resources": list(a.resources),
                        "context": {k: list(v) for k, v in a.context.items()},
                        "modeled": sorted(a.modeled),
                    }
                    for a in described.authorizations
                ],
            }
        )
        with self._lock:
            self._file.write(line + "\n")

    @classmethod
    def from_env(cls) -> CallLog | None:
        """The log :data:`CALL_LOG_ENV` names, or ``None`` when recording is off."""
        path = os.environ.get(CALL_LOG_ENV)
        return cls(Path(path)) if path else None


def read_calls(paths: Iterable[Path]) -> list[RecordedCall]:
    """Every call recorded in ``paths`` (missing files are skipped), in the order each server saw them."""
    calls = []
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            record = json.loads(line)
            calls.append(
                RecordedCall(
                    component=_COMPONENT_OF_KEY.get(record["key"], record["key"]),
                    service=record["service"],
                    operation=record["operation"],
                    status=record["status"],
                    authorizations=tuple(
                        Authorization(
                            a["action"],
                            tuple(a["resources"]),
                            {k: tuple(v) for k, v in a["context"].items()},
                            frozenset(a["modeled"]),
                        )
                        for a in record["authorizations"]
                    ),
                )
            )
    return calls


def record_moto_calls(log: CallLog) -> None:
    """Make the moto server describe every signed request it serves into ``log`` (WSGI, around moto's dispatcher)."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication

    serve = DomainDispatcherApplication.__call__

    def __call__(self: Any, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        headers = {name[5:].replace("_", "-"): value for name, value in environ.items() if name.startswith("HTTP_")}
        if "CONTENT_TYPE" in environ:
            headers["content-type"] = environ["CONTENT_TYPE"]
        request = HttpRequest.parse(
            environ["REQUEST_METHOD"], environ.get("PATH_INFO", ""), environ.get("QUERY_STRING", ""), headers
        )
        signed = signer(request)
        if signed is None:
            return serve(self, environ, start_response)
        if signed[2] not in _BODY_UNNEEDED and environ.get("CONTENT_LENGTH"):
            body = environ["wsgi.input"].read(int(environ["CONTENT_LENGTH"]))
            environ["wsgi.input"] = io.BytesIO(body)
            request = request._replace(body=body)
        statuses: list[int] = []

        def recording_start_response(status: str, *args: Any) -> Any:
            statuses.append(int(status.split()[0]))
            return start_response(status, *args)

        try:
            return serve(self, environ, recording_start_response)
        finally:
            log.write(_described(request, signed[0]), statuses[0] if statuses else 500)

    setattr(DomainDispatcherApplication, "__call__", __call__)  # noqa: B010 - a method, for mypy


def _described(request: HttpRequest, access_key: str) -> Described:
    """:func:`describe`, or, if it fails on ``request``, a record that says so (the request is served either way)."""
    try:
        described = describe(request, account=LOCAL_ACCOUNT_ID)
    except Exception as exc:  # noqa: BLE001 - the server must serve the request whatever the recorder makes of it
        described = None
        failure = f"undescribed {request.method} {request.path}: {type(exc).__name__}: {exc}"
    else:
        failure = "undescribed: not signed"
    return described or Described(access_key, "?", failure, (Authorization("", ()),))


Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class RecordingMiddleware:
    """ASGI middleware that describes every signed request the app serves into a :class:`CallLog`."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]], log: CallLog) -> None:
        self._app = app
        self._log = log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]}
        request = HttpRequest.parse(scope["method"], scope["path"], scope["query_string"].decode(), headers)
        signed = signer(request)
        if signed is None:
            await self._app(scope, receive, send)
            return
        described = _described(request, signed[0])
        statuses: list[int] = []

        async def recording_send(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                statuses.append(int(message["status"]))
            await send(message)

        try:
            await self._app(scope, receive, recording_send)
        finally:
            self._log.write(described, statuses[0] if statuses else 500)
