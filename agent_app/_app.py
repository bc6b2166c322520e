"""``AgentCoreRLApp``: a ``BedrockAgentCoreApp`` whose entrypoint runs one rollout in the background.

``/invocations`` validates the ``_rollout`` block, answers ``{"status": "processing", ...}`` at once and
starts the handler on the parent's worker loop (through the parent's own sync/async dispatch). ``/ping``
is the parent's: ``HealthyBusy`` while a rollout is registered as an async task, which lasts until its
result is stored. On shutdown (uvicorn turns SIGTERM into the lifespan's exit) a rollout whose handler
has not finished ends as ``cancelled``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from agent_app._model_key import ModelKeys
from agent_app._results import RESULT_WRITE_ATTEMPTS, ResultWriteError, ResultWriter
from agent_app._rollout import Rollout, RolloutRegistry
from agent_app._sdk import BedrockAgentCoreApp, BedrockAgentCoreContext, RequestContext
from agent_app.logging import configure_logging
from rollout_contract.aws import ClientFactory
from rollout_contract.ids import InvalidIdError, new_session_id, validate_session_key_segment
from rollout_contract.keys import RESULT_SUFFIX, ResultKey
from rollout_contract.messages import MissingRolloutFieldsError, RolloutSpec
from rollout_contract.results import PROOF_KEY_FIELD, ROLLOUT_FIELD, RolloutResult, Timings, redact_payload

if TYPE_CHECKING:
    from types_boto3_s3 import S3Client

__all__ = ["AgentCoreRLApp"]

logger = logging.getLogger(__name__)

DEFAULT_PORT = 8080
PORT_ENV = "PORT"
#: How long shutdown waits for results already being written.
SHUTDOWN_WRITE_GRACE_S = 10.0


class AgentCoreRLApp(BedrockAgentCoreApp):
    """An AgentCore app that turns its entrypoint into a fire-and-forget RL rollout service.

    Example:
        app = AgentCoreRLApp()

        @app.rollout_entrypoint
        async def solve(payload):
            ...
            return {"rewards": reward, "response": text}

        app.run()
    """

    def __init__(
        self,
        *,
        s3_client: S3Client | None = None,
        redact_keys: Iterable[str] = (),
        debug: bool = False,
        lifespan: Callable[[Any], contextlib.AbstractAsyncContextManager[Any]] | None = None,
        middleware: Sequence[Any] | None = None,
    ) -> None:
        """Create the app.

        Args:
            s3_client: boto3 S3 client for results; built on first use by ``ClientFactory`` (botocore's standard
                retries, ``RESULT_WRITE_ATTEMPTS`` attempts; ``AWS_ENDPOINT_URL_S3`` honoured) when not given.
                Assigning ``app.s3_client = ...`` later (ART's way) works too.
            redact_keys: payload keys (at any depth) replaced by a marker in the stored ``payload``;
                ``_rollout.api_key`` is always redacted.
            debug: the parent's debug actions and logging.
            lifespan: the parent's lifespan; pending rollouts are cancelled before it exits.
            middleware: the parent's Starlette middleware.

        Logging: when the root logger has no handler yet, :func:`agent_app.logging.configure_logging` runs (as in
        ART, so ``logger.info`` lines appear, as JSON with ``sessionId``); logging configured before is kept.
        """
        self._rollout_handler: Callable[..., Any] | None = None
        self._rollouts = RolloutRegistry()
        self._redact_keys = tuple(redact_keys)
        self._s3_client = s3_client
        self._writer: ResultWriter | None = None
        self._writer_lock = threading.Lock()
        self._background: set[asyncio.Task[None]] = set()
        self._model_keys = ModelKeys()
        super().__init__(debug=debug, lifespan=self._cancelling_on_exit(lifespan), middleware=middleware)
        if not logging.getLogger().handlers:  # nobody configured logging: ART's JSON lines with session ids
            configure_logging()

    @property
    def s3_client(self) -> S3Client:
        """The boto3 S3 client results are written with (built on first use)."""
        return self._result_writer().s3_client

    @s3_client.setter
    def s3_client(self, client: S3Client) -> None:
        with self._writer_lock:
            self._s3_client = client
            self._writer = None

    def rollout_entrypoint(self, func: Callable[..., Any]) -> Callable[..., Any]:
        """Register ``func`` as the rollout handler and return it unchanged.

        ``func`` may be sync or async and take ``(payload)`` or ``(payload, context)``; it returns a dict,
        with the reward under ``"rewards"``. ``app.handlers["main"]`` is the ``/invocations`` entrypoint:
        it takes ``(payload, context)`` and carries ``func``'s name, as ART's wrapper does.
        """

        def accept(payload: Any, context: RequestContext) -> dict[str, str]:
            return self._accept(payload, context)

        accept.__name__, accept.__qualname__, accept.__doc__ = func.__name__, func.__qualname__, func.__doc__
        self._rollout_handler = func
        self.handlers["main"] = accept
        return func

    def save_result(
        self,
        result: Mapping[str, Any],
        rollout_config: Mapping[str, Any],
        result_key: str,
        payload: Mapping[str, Any] | None = None,
    ) -> bool:
        """Store ``result`` as a ``succeeded`` rollout's result at ``result_key`` (ART's ``save_result``).

        As in ART, ``status_code`` (200) and ``stop_reason`` (``"end_turn"``) are added when absent and the
        ids, ``s3_bucket``, ``result_key`` and ``payload`` are set; the stored ``payload`` is redacted like
        the entrypoint's. Unlike ART, an object already at the key is kept (first writer wins), and
        ``result`` is not modified.

        Args:
            result: the handler's dict (JSON-serializable), e.g. ``{"rewards": 1.0}``.
            rollout_config: the ``_rollout`` block: ``exp_id``, ``input_id`` and ``s3_bucket``.
            result_key: ``{exp_id}/{input_id}/{session_id}.json`` of the same ids.
            payload: the request payload to store with the result.

        Returns:
            ``True`` if this call stored the result; ``False`` if one was already there.

        Raises:
            ValueError: a missing ``_rollout`` field, or a ``result_key`` that breaks the key rules or
                names other ids (``rollout_contract.InvalidIdError`` is a ``ValueError``).
            ResultWriteError: S3 refused the write.
        """
        target = RolloutSpec.model_validate(dict(rollout_config)).save_target()
        if target is None:
            raise MissingRolloutFieldsError(
                "Missing required rollout config field(s): exp_id, input_id and s3_bucket say where the result goes"
            )
        exp_id, input_id, bucket = target
        prefix = f"{exp_id}/{input_id}/"
        if not (result_key.startswith(prefix) and result_key.endswith(RESULT_SUFFIX)):
            raise ValueError(f"result_key {result_key!r} is not {prefix}<session_id>{RESULT_SUFFIX} (the config's ids)")
        key = ResultKey(exp_id, input_id, validate_session_key_segment(result_key[len(prefix) : -len(RESULT_SUFFIX)]))
        stored_payload = redact_payload(payload, self._redact_keys) if payload is not None else None
        document = RolloutResult.from_handler_output(
            result, key=key, s3_bucket=bucket, payload=stored_payload, timings=Timings(finished_at=time.time())
        )
        body = document.to_json_bytes()
        rollout = self._rollouts.get(key.session_id)  # a session this process runs: its proof key signs the result
        return self._result_writer().write(bucket, result_key, body, rollout.proof(body) if rollout else None)

    def run(self, port: int | None = None, host: str | None = None, **kwargs: Any) -> None:
        """Serve the app; ``port`` defaults to the ``PORT`` environment variable, else 8080."""
        super().run(port=_port_from_env() if port is None else port, host=host, **kwargs)

    def _accept(self, payload: Any, context: RequestContext) -> dict[str, str]:
        """Answer ``/invocations`` (the parent runs this in its threadpool) and start the rollout."""
        if not isinstance(payload, dict):
            raise HTTPException(400, f"the payload must be a JSON object, got {type(payload).__name__}")
        proof_key = _take_proof_key(payload)
        if proof_key is not None and isinstance(payload.get(ROLLOUT_FIELD), dict):
            # Dispatched by the experiment's functions: its model calls need the experiment's key (D100).
            self._model_keys.fill(payload[ROLLOUT_FIELD])
        try:
            spec = RolloutSpec.from_payload(payload)
            target = spec.save_target()
        except MissingRolloutFieldsError as exc:
            raise HTTPException(500, str(exc)) from exc
        except (InvalidIdError, ValidationError) as exc:
            raise HTTPException(400, f"invalid {ROLLOUT_FIELD} block: {exc}") from exc
        session_id = context.session_id or new_session_id()
        key = None
        if target is not None:
            exp_id, input_id, _ = target
            try:
                key = ResultKey(exp_id, input_id, validate_session_key_segment(session_id))
            except InvalidIdError as exc:
                raise HTTPException(400, str(exc)) from exc

        def make() -> Rollout:
            rollout = Rollout.accept(payload, spec, session_id, key, self._redact_keys, proof_key)
            rollout.ping_task_id = self.add_async_task("rollout", {"session_id": session_id})
            return rollout

        rollout, created = self._rollouts.get_or_add(session_id, make)
        if created:
            self._ensure_worker_loop().call_soon_threadsafe(self._spawn, rollout, context)
        else:
            logger.info("session %s already has a rollout; not starting another", session_id)
        return rollout.response

    def _spawn(self, rollout: Rollout, context: RequestContext) -> None:
        """Start the rollout's task on the worker loop, keeping a reference until it ends."""
        task = asyncio.get_running_loop().create_task(self._run(rollout, context), name=f"rollout-{rollout.session_id}")
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _run(self, rollout: Rollout, context: RequestContext) -> None:
        """Run the handler, then store its result; the ping stays busy until both are done."""
        handler = self._rollout_handler
        assert handler is not None, "a rollout runs only after rollout_entrypoint registered its handler"
        context = context.model_copy(update={"session_id": rollout.session_id})
        request_id = BedrockAgentCoreContext.get_request_id() or str(uuid.uuid4())
        BedrockAgentCoreContext.set_request_context(request_id, rollout.session_id)
        if rollout.saves_result:
            # Build the S3 client now, off the path from the handler's end to the stored result.
            await asyncio.to_thread(self._result_writer)
        rollout.started_at = time.time()
        output: Any = None
        error: BaseException | None = None
        try:
            output = await self._invoke_handler(handler, context, self._takes_context(handler), rollout.payload)
        except BaseException as exc:  # as ART: a handler's CancelledError or SystemExit is its failure too
            error = exc
        finished_at = time.time()
        if not rollout.claim():
            logger.info("rollout %s finished after shutdown had already ended it", rollout.session_id)
            return
        try:
            if rollout.saves_result:
                await asyncio.to_thread(self._store, rollout, rollout.handler_result(output, error, finished_at))
            elif error is not None:
                logger.error("rollout %s failed (result not saved)", rollout.session_id, exc_info=error)
        finally:
            self._finish(rollout)

    def _store(self, rollout: Rollout, body: bytes) -> None:
        """Write a result object; failures are logged (the sweeper ends such rollouts as ``timed_out``)."""
        key, s3_bucket = rollout.target
        try:
            stored = self._result_writer().write(s3_bucket, str(key), body, rollout.proof(body))
        except ResultWriteError:
            logger.exception("rollout %s: result not stored", rollout.session_id)
            return
        if stored:
            logger.info("rollout %s: result stored at s3://%s/%s", rollout.session_id, rollout.s3_bucket, rollout.key)

    def _finish(self, rollout: Rollout) -> None:
        if rollout.ping_task_id is not None:
            self.complete_async_task(rollout.ping_task_id)
        rollout.done.set()

    def _result_writer(self) -> ResultWriter:
        """The writer, with the S3 client built once on first use."""
        with self._writer_lock:
            if self._writer is None:
                if self._s3_client is None:
                    self._s3_client = ClientFactory(max_attempts=RESULT_WRITE_ATTEMPTS).client("s3")
                self._writer = ResultWriter(self._s3_client)
            return self._writer

    def _cancel_unfinished(self) -> None:
        """End every rollout whose handler is still running as ``cancelled``; let pending writes finish."""
        pending = self._rollouts.unfinished()
        for rollout in pending:
            if rollout.claim():
                logger.warning("rollout %s: process shutting down, ending it as cancelled", rollout.session_id)
                if rollout.saves_result:
                    self._store(rollout, rollout.cancelled_result())
                self._finish(rollout)
        deadline = time.monotonic() + SHUTDOWN_WRITE_GRACE_S
        for rollout in pending:
            rollout.done.wait(max(0.0, deadline - time.monotonic()))

    def _cancelling_on_exit(
        self, lifespan: Callable[[Any], contextlib.AbstractAsyncContextManager[Any]] | None
    ) -> Callable[[Any], contextlib.AbstractAsyncContextManager[Any]]:
        """Wrap the user's lifespan so that unfinished rollouts are cancelled before it exits."""

        @contextlib.asynccontextmanager
        async def cancelling(app: Any) -> AsyncIterator[Any]:
            async with contextlib.AsyncExitStack() as stack:
                state = await stack.enter_async_context(lifespan(app)) if lifespan is not None else None
                stack.push_async_callback(run_in_threadpool, self._cancel_unfinished)
                yield state

        return cancelling


def _take_proof_key(payload: dict[str, Any]) -> str | None:
    """Remove the session's proof key from ``payload``'s ``_rollout`` (the handler never sees it) and return it."""
    block = payload.get(ROLLOUT_FIELD)
    if not isinstance(block, dict) or PROOF_KEY_FIELD not in block:
        return None
    proof_key = block.pop(PROOF_KEY_FIELD)
    if not isinstance(proof_key, str) or not proof_key:
        raise HTTPException(400, f"{ROLLOUT_FIELD}.{PROOF_KEY_FIELD} must be a non-empty string (the dispatcher's)")
    return proof_key


def _port_from_env() -> int:
    raw = os.environ.get(PORT_ENV, str(DEFAULT_PORT))
    try:
        port = int(raw)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise ValueError(f"{PORT_ENV}={raw!r} is not a port number: set it to an integer 0-65535 or unset it")
    return port
