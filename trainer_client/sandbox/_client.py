"""``SandboxClient``: ART 0.2.0's sandbox client on a sandbox experiment, inside the shared budgets.

Same names, arguments and results as ``agentcore_rl_toolkit.sandbox``: ``client.start()`` gives a
:class:`Sandbox`, ``sb.exec(argv, cwd=..., env=..., timeout=...)`` runs a command (foreground, or background
with an :class:`ExecHandle`), ``sb.terminate()`` (or leaving ``with``) stops the session. What differs:

- every sandbox holds a slot of the account's session budget and every call spends a token of the runtime's
  invoke budget, the same DynamoDB items the experiment's functions use (``_budget``);
- every sandbox has a deadline (``timeout``, default 1 h, at most 8 h); the sweeper stops a sandbox nobody
  terminated then, so a trainer that dies leaves nothing running past it. A command's own timeout is cut to the
  time the sandbox has left, and nothing is sent to a sandbox past its deadline;
- ``result()`` without a timeout (and a foreground ``exec``) waits with one call however long the command runs
  (one more each time a call's read timeout ends), instead of polling: a command costs one invoke token, not
  one every two seconds, and a command longer than ACR's 15-minute request limit still ends in its result;
- bad arguments fail before anything is sent (``TypeError`` / ``ValueError`` naming the field).

On a runtime that is none of our experiments' (``SandboxClient(runtime_arn=...)`` of any sandbox runtime the caller
may invoke, as in ART), the client says so once and works as ART's: no session or invoke budget, no sweeper
deadline; ``terminate()`` is the only stop.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rollout_budgets.errors import AcrCallError, NoTokenError
from rollout_contract.aws import ClientFactory
from rollout_contract.ids import SESSION_ID_MAX_LENGTH, SESSION_ID_MIN_LENGTH, join_exp_id, validate_input_id
from rollout_contract.invocations import (
    COMPLETED,
    ENVELOPE_KEY,
    IN_PROGRESS,
    OPERATION_GET,
    OPERATION_START,
    STATUSES,
    VERSION,
)
from rollout_contract.messages import DEFAULT_QUEUE_TIMEOUT_S, validate_timeout_s
from rollout_contract.protocol import DEFAULT_QUALIFIER, region_of_arn
from rollout_contract.resources import ExperimentKind, experiment_of_runtime
from rollout_contract.sandbox import (
    ACTION_FIELD,
    ACTION_START,
    COMMAND_FIELD,
    CWD_FIELD,
    DEFAULT_EXEC_TIMEOUT_S,
    DEFAULT_SANDBOX_LABEL,
    DEFAULT_SANDBOX_TIMEOUT_S,
    ENV_FIELD,
    INVOCATION_ID_PATTERN,
    MAX_EXEC_TIMEOUT_S,
    MAX_SANDBOX_TIMEOUT_S,
    MIN_EXEC_TIMEOUT_S,
    NETWORK_FIELD,
    SANDBOX_SESSION_PREFIX,
    TIMEOUT_FIELD,
    TTL_FIELD,
    is_sandbox_session,
    new_sandbox_session_id,
)
from rollout_contract.sessions import SessionState
from trainer_client._aws import load_descriptor
from trainer_client._exceptions import ExperimentNotFoundError
from trainer_client.sandbox._budget import DirectCalls, SandboxBudget, SandboxStart, StillRunning
from trainer_client.sandbox._types import (
    ExecError,
    ExecResult,
    ExecTimeoutError,
    SandboxEndedError,
    SandboxError,
    SandboxProtocolError,
)

if TYPE_CHECKING:
    from types_boto3_bedrock_agentcore import BedrockAgentCoreClient
    from types_boto3_ssm import SSMClient

    from rollout_contract import ExperimentDescriptor

__all__ = ["ExecHandle", "Sandbox", "SandboxClient"]

logger = logging.getLogger("trainer_client.sandbox")

#: The label sandboxes on a runtime that is none of our experiments' carry (no sessions table records them).
_DIRECT_LABEL = "sandbox"
#: ``result(timeout)`` polls as ART's client does: from 0.1 s, doubling to 2 s.
_POLL_FIRST_S = 0.1
_POLL_MAX_S = 2.0


class SandboxClient:
    """Starts sandboxes on a sandbox experiment's runtime and attaches to live ones (ART's ``SandboxClient``).

    ``SandboxClient(runtime_arn=...)`` works as ART's does on any sandbox runtime the caller may invoke. On one our
    stack deployed (the experiment read from the runtime's name, its descriptor from SSM) the budgets and the
    sweeper's deadline apply; on any other it logs a warning saying they do not, and calls the runtime directly
    (:attr:`budgeted` is ``False``). :meth:`for_experiment` takes the experiment's name (and works on the local
    stack too).

    Args:
        runtime_arn: the sandbox experiment's runtime.
        region: AWS region (default: the ARN's, as in ART).
        qualifier: the runtime endpoint; the experiment's (``DEFAULT``) is the only one its budgets cover.
        max_retry_attempts: attempts of a call that fails in a way that may pass (throttled, cold start, 5xx).
        max_pool_connections: connections per AWS client.
        read_timeout: seconds a call may wait for its answer (a foreground command's end); a command still
            running then is waited for with another call.
        connect_timeout: TCP connect timeout in seconds.
        experiment: the sandbox experiment (default: read from the runtime's name).
        run: a run of the experiment: the label sandboxes are recorded under (``experiment/run``).
        timeout: default lifetime of a sandbox in seconds (1 h); at most 8 h. The sweeper stops it then.
        queue_timeout: seconds :meth:`start` may wait for a free session slot.
        descriptor: the experiment's descriptor, when already read (no SSM call then).
        ssm: an SSM client for the descriptor (default: a new one).
        clock: the wall clock (tests).
        agentcore: the ``bedrock-agentcore`` client for a runtime that is not ours (default: a new one).

    Raises:
        ValueError: the runtime's experiment hosts an agent, or the arguments are out of range.
        ExperimentNotFoundError: ``experiment`` was given and has no descriptor.
    """

    def __init__(
        self,
        runtime_arn: str,
        region: str | None = None,
        qualifier: str = DEFAULT_QUALIFIER,
        max_retry_attempts: int = 5,
        max_pool_connections: int = 10,
        read_timeout: int = 900,
        connect_timeout: int = 15,
        *,
        experiment: str | None = None,
        run: str | None = None,
        timeout: float = DEFAULT_SANDBOX_TIMEOUT_S,
        queue_timeout: float = DEFAULT_QUEUE_TIMEOUT_S,
        descriptor: ExperimentDescriptor | None = None,
        ssm: SSMClient | None = None,
        clock: Callable[[], float] = time.time,
        agentcore: BedrockAgentCoreClient | None = None,
    ) -> None:
        self.runtime_arn = runtime_arn
        self.region = region or region_of_arn(runtime_arn)
        if self.region is None:
            raise ValueError(f"Invalid ARN format, cannot extract region: {runtime_arn}")
        self.qualifier = qualifier
        self.timeout = _lifetime(timeout)
        self.queue_timeout = validate_timeout_s(queue_timeout, "queue_timeout")
        if descriptor is None:
            descriptor = _our_descriptor(runtime_arn, experiment, self.region, ssm)
        #: The experiment's descriptor; ``None`` on a runtime that is none of our experiments'.
        self.descriptor = descriptor
        #: Whether the session and invoke budgets and the sweeper's deadline apply (the runtime is one of ours).
        self.budgeted = descriptor is not None
        self.trainer_id = uuid.uuid4().hex
        self._clock = clock
        factory = ClientFactory(
            region=self.region,
            endpoints=descriptor.endpoints if descriptor is not None else {},
            max_attempts=max_retry_attempts + 1,
            max_pool_connections=max_pool_connections,
        )
        # A call waits for its command's end; no hidden retries: each attempt takes its own invoke-budget token.
        calls = factory.model_copy(update={"read_timeout_s": read_timeout, "connect_timeout_s": connect_timeout})
        agentcore = agentcore or calls.client("bedrock-agentcore", single_attempt=True)
        self._budget: SandboxBudget
        if descriptor is None:
            logger.warning(
                "runtime %s is none of this project's experiments: its sandboxes take no session slot and spend no "
                "invoke token of ours, and no sweeper stops them at their deadline; terminate() each (as in ART)",
                runtime_arn,
            )
            self.exp_id = join_exp_id(_DIRECT_LABEL, run)
            self._budget = DirectCalls(
                agentcore, runtime_arn=runtime_arn, qualifier=qualifier, attempts=max_retry_attempts, clock=clock
            )
            return
        _check_descriptor(descriptor, runtime_arn, qualifier)
        self.exp_id = join_exp_id(descriptor.exp_id, run)
        self._budget = SandboxBudget(
            descriptor,
            agentcore=agentcore,
            dynamodb=factory.client("dynamodb"),
            trainer_id=self.trainer_id,
            attempts=max_retry_attempts,
            clock=clock,
        )

    @classmethod
    def for_experiment(
        cls,
        experiment: str,
        *,
        run: str | None = None,
        region: str | None = None,
        ssm: SSMClient | None = None,
        **kwargs: Any,
    ) -> SandboxClient:
        """A client of sandbox experiment ``experiment`` (its descriptor from SSM; the local stack's too).

        Raises:
            ExperimentNotFoundError: no such experiment; the message says how to create one.
            ValueError: the experiment hosts an agent, not sandboxes.
        """
        descriptor = load_descriptor(experiment, region=region, ssm=ssm)
        return cls(
            descriptor.runtime_arn,
            descriptor.region,
            descriptor.runtime_qualifier,
            run=run,
            descriptor=descriptor,
            **kwargs,
        )

    def start(
        self, session_id: str | None = None, *, timeout: float | None = None, input_id: str | None = None
    ) -> Sandbox:
        """Start a sandbox: take a session slot (waiting up to ``queue_timeout``), then start its session.

        Args:
            session_id: the session id (default: ``sandbox-<uuid4>``); it must start with ``sandbox-``.
            timeout: seconds the sandbox may live (default: the client's ``timeout``; at most 8 h).
            input_id: a label for the sandbox in the sessions table and ``rollouts sessions`` (say, the task's id).

        Returns:
            A :class:`Sandbox`, a context manager that terminates it on exit.

        Raises:
            SandboxCapacityError: no session slot came free in time.
            SandboxProtocolError: the runtime does not answer as a sandbox (an agent image deployed?).
            SandboxError: the session could not be started (an AWS error is ``__cause__``).
        """
        session_id = _sandbox_session_id(session_id) if session_id is not None else new_sandbox_session_id()
        lifetime = self.timeout if timeout is None else _lifetime(timeout)
        now = self._clock()
        record = SandboxStart(
            exp_id=self.exp_id,
            input_id=validate_input_id(input_id or DEFAULT_SANDBOX_LABEL),
            session_id=session_id,
            trainer=self.trainer_id,
            submitted_at=now,
            deadline_at=now + self.queue_timeout + lifetime,
        )
        self._budget.admit(record, until=now + self.queue_timeout)
        try:
            answer = self._budget.call(session_id, {ACTION_FIELD: ACTION_START, TTL_FIELD: math.ceil(lifetime)})
            if answer.get("status") != "ok":
                raise SandboxProtocolError(f"unexpected sandbox start response: {answer!r}"[:500])
            started_at = self._clock()
            if not self._budget.mark_running(session_id, started_at=started_at, deadline_at=started_at + lifetime):
                raise SandboxEndedError(f"sandbox {session_id} was ended while it started (its start limit passed)")
        except BaseException as exc:
            self._budget.abandon(record.key)
            if isinstance(exc, AcrCallError | NoTokenError | StillRunning):
                raise SandboxError(f"starting sandbox {session_id} failed: {exc}") from exc
            raise
        logger.info("started sandbox %s (deadline in %.0f s)", session_id, lifetime)
        return Sandbox(self, record, deadline_at=started_at + lifetime)

    def attach(self, session_id: str) -> Sandbox:
        """A handle on a live sandbox of this experiment (one read of its sessions-table item).

        On a runtime that is not ours nothing records a sandbox: the handle is made without a read, its deadline the
        client's ``timeout`` from now.

        Raises:
            ValueError: ``session_id`` is not a sandbox's.
            SandboxEndedError: the sandbox is not running (finished, past its deadline, or never started).
        """
        if not self.budgeted:
            now = self._clock()
            start = SandboxStart(
                exp_id=self.exp_id,
                input_id=DEFAULT_SANDBOX_LABEL,
                session_id=_sandbox_session_id(session_id),
                trainer=self.trainer_id,
                submitted_at=now,
                deadline_at=now + self.timeout,
            )
            return Sandbox(self, start, deadline_at=start.deadline_at)
        record = self._budget.ledger.get(_sandbox_session_id(session_id))
        if record is None or record.state is not SessionState.RUNNING or record.deadline_at is None:
            state = "never started" if record is None else f"{record.state.value}"
            raise SandboxEndedError(f"sandbox {session_id} is not running ({state}); start a new one")
        start = SandboxStart(
            exp_id=record.exp_id or self.exp_id,
            input_id=record.input_id or DEFAULT_SANDBOX_LABEL,
            session_id=session_id,
            trainer=self.trainer_id,
            submitted_at=record.submitted_at or 0.0,
            deadline_at=record.deadline_at,
        )
        return Sandbox(self, start, deadline_at=record.deadline_at)


class Sandbox:
    """One sandbox session (ART's ``Sandbox``); a context manager that terminates it on exit.

    Attributes:
        session_id: its ACR session id.
        deadline_at: unix time at which the sweeper stops it if nobody terminated it.
    """

    def __init__(self, client: SandboxClient, start: SandboxStart, *, deadline_at: float) -> None:
        self._client = client
        self._start = start
        self.session_id = start.session_id
        self.deadline_at = deadline_at
        self._terminated = False

    def exec(
        self,
        command: list[str],
        timeout: int | None = None,
        cwd: str | None = None,
        env: dict[str, Any] | None = None,
        *,
        background: bool = False,
        invocation_id: str | None = None,
        network: bool = False,
    ) -> ExecResult | ExecHandle:
        """Run ``command`` (argv, no shell) and wait for it, or with ``background=True`` return its handle.

        ``network=True`` grants the command the session's network (a confined sandbox gives it none otherwise).

        ``timeout`` is the command's deadline in seconds (1-3600, default 300), cut to the time the sandbox has
        left; output waiting counts. A nonzero exit is a result; a command past its deadline raises
        :class:`ExecTimeoutError` with its result. ``invocation_id`` (default: a new uuid) addresses the command:
        a repeated start returns what the first did and never runs the new command.

        Raises:
            TypeError: ``command`` is not a list of strings.
            ValueError: an empty ``command``, a ``timeout`` out of range, a bad ``env`` name or ``invocation_id``.
            SandboxEndedError: the sandbox was terminated or passed its deadline.
            ExecError: the command could not be submitted or completed; ``.handle`` recovers it.
        """
        self._ensure_active()
        if not isinstance(command, list) or any(not isinstance(arg, str) for arg in command):
            raise TypeError("command must be a list of strings")
        if not command:
            raise ValueError('command is empty: give the executable, then its arguments (["/bin/sh", "-c", script])')
        body: dict[str, Any] = {COMMAND_FIELD: command, TIMEOUT_FIELD: self._exec_timeout(timeout)}
        if cwd is not None:
            body[CWD_FIELD] = cwd
        if network:
            body[NETWORK_FIELD] = True
        if env is not None:
            bad = [name for name in env if not isinstance(name, str) or not name or "=" in name]
            if bad:
                raise ValueError(f"env names must be non-empty strings without '=': {bad!r}")
            body[ENV_FIELD] = {name: str(value) for name, value in env.items()}
        handle = self.get_exec(invocation_id if invocation_id is not None else str(uuid.uuid4()))
        try:
            state = self._invoke(OPERATION_START, handle.invocation_id, background=background, **body)
        except StillRunning:
            return handle.result()  # a foreground command past the read timeout: wait for it
        except Exception as exc:
            raise ExecError(
                f"Execution request failed; use this handle to recover the execution: {type(exc).__name__}: {exc}",
                handle,
            ) from exc
        if background:
            return handle
        if state["status"] == IN_PROGRESS:
            return handle.result()
        return handle._result_from_state(state)

    def get_exec(self, invocation_id: str) -> ExecHandle:
        """A handle on command ``invocation_id`` (no call).

        Raises:
            ValueError: not 1-128 letters, digits, dots, underscores or hyphens, starting alphanumeric.
            SandboxEndedError: the sandbox was terminated or passed its deadline.
        """
        self._ensure_active()
        if not isinstance(invocation_id, str) or not INVOCATION_ID_PATTERN.fullmatch(invocation_id):
            raise ValueError(
                "invocation_id must be 1-128 letters, digits, dots, underscores or hyphens, starting alphanumeric"
            )
        return ExecHandle(self, invocation_id)

    def terminate(self) -> None:
        """Stop the sandbox's session and free its slot (idempotent; never raises).

        When the stop fails, the sandbox's deadline becomes now, so the sweeper stops it within its period.
        """
        if self._terminated:
            return
        self._terminated = True
        self._client._budget.terminate(self._start.key)
        logger.info("terminated sandbox %s", self.session_id)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.terminate()

    def _ensure_active(self) -> None:
        if self._terminated:
            raise SandboxEndedError(
                f"Sandbox {self.session_id[:16]}... is terminated; use SandboxClient.start() for a new session"
            )
        if self._client._clock() >= self.deadline_at:
            raise SandboxEndedError(
                f"Sandbox {self.session_id[:16]}... passed its deadline (the sweeper stops its session); use "
                "SandboxClient.start() for a new one, with a longer timeout if it needs one"
            )

    def _exec_timeout(self, timeout: int | None) -> int:
        seconds = DEFAULT_EXEC_TIMEOUT_S if timeout is None else timeout
        if isinstance(seconds, bool) or not isinstance(seconds, int):
            raise ValueError(f"timeout must be a whole number of seconds, got {timeout!r}")
        if not MIN_EXEC_TIMEOUT_S <= seconds <= MAX_EXEC_TIMEOUT_S:
            raise ValueError(f"timeout must be {MIN_EXEC_TIMEOUT_S}-{MAX_EXEC_TIMEOUT_S} seconds, got {seconds}")
        left = math.floor(self.deadline_at - self._client._clock())
        return max(MIN_EXEC_TIMEOUT_S, min(seconds, left))

    def _invoke(
        self, operation: str, invocation_id: str, *, background: bool | None = None, **body: Any
    ) -> dict[str, Any]:
        """One start or get of command ``invocation_id``; its checked state.

        Raises:
            StillRunning: a waiting call's read timeout ended before the command.
            SandboxProtocolError: the answer is not a state of this command.
            AcrCallError: the call failed.
        """
        self._ensure_active()
        envelope: dict[str, Any] = {"version": VERSION, "operation": operation, "invocation_id": invocation_id}
        if background is not None:
            envelope["background"] = background
        state = self._client._budget.call(self.session_id, {ENVELOPE_KEY: envelope, **body})
        if (
            state.get("version") != VERSION
            or state.get("invocation_id") != invocation_id
            or state.get("status") not in STATUSES
        ):
            raise SandboxProtocolError(
                f"unexpected execution response (is the sandbox image deployed?): {state!r}"[:500]
            )
        return state


class ExecHandle:
    """One command, by its sandbox and invocation id (ART's ``ExecHandle``).

    Recover it elsewhere with ``client.attach(session_id).get_exec(invocation_id)``.
    """

    def __init__(self, sandbox: Sandbox, invocation_id: str) -> None:
        self._sandbox = sandbox
        self.invocation_id = invocation_id
        self.session_id = sandbox.session_id

    def status(self) -> str:
        """``in_progress``, ``completed``, ``interrupted`` or ``not_found`` (one call)."""
        return str(self._get()["status"])

    def result(self, timeout: float | None = None) -> ExecResult:
        """Wait for the command's result.

        Without ``timeout``, one call waits for the end however long the command runs (another each time a
        call's read timeout ends). With ``timeout``, the state is polled (0.1 s doubling to 2 s, as ART's client
        does) and the wait ends after ``timeout`` seconds; it never stops the command.

        Raises:
            TimeoutError: still running after ``timeout`` (the handle stays usable).
            ExecTimeoutError: the command passed its own deadline; ``.result`` holds its output.
            ExecError: the command was not found, was interrupted, or could not be run.
            SandboxEndedError: the sandbox was terminated or passed its deadline.
        """
        if timeout is not None and timeout < 0:
            raise ValueError("timeout must be nonnegative")
        clock = time.monotonic
        deadline = None if timeout is None else clock() + timeout
        interval = _POLL_FIRST_S
        while True:
            state = self._get()
            if state["status"] != IN_PROGRESS:
                return self._result_from_state(state)
            if deadline is None:
                waited = self._wait()
                if waited is not None and waited["status"] != IN_PROGRESS:
                    return self._result_from_state(waited)
                continue
            remaining = deadline - clock()
            if remaining <= 0:
                raise TimeoutError(f"Invocation {self.invocation_id} is still running")
            time.sleep(min(interval, remaining))
            interval = min(interval * 2, _POLL_MAX_S)

    def _get(self) -> dict[str, Any]:
        try:
            return self._sandbox._invoke(OPERATION_GET, self.invocation_id)
        except (AcrCallError, NoTokenError, StillRunning) as exc:
            raise ExecError(f"looking up the command failed: {exc}", self) from exc

    def _wait(self) -> dict[str, Any] | None:
        """A foreground start of this (known, running) command: answered when it ends; ``None`` if the call ended
        first. A repeated start never runs anything new."""
        try:
            return self._sandbox._invoke(OPERATION_START, self.invocation_id, background=False)
        except StillRunning:
            return None
        except (AcrCallError, NoTokenError) as exc:
            raise ExecError(f"waiting for the command failed: {exc}", self) from exc

    def _result_from_state(self, state: dict[str, Any]) -> ExecResult:
        if state["status"] != COMPLETED:
            raise ExecError(str(state["status"]), self)
        if "error" in state:
            error = state["error"]
            if not isinstance(error, dict):
                raise SandboxProtocolError(f"unexpected command error: {error!r}"[:500])
            raise ExecError(f"{error.get('code')}: {error.get('message')}", self)
        result = ExecResult.parse(state.get("result"))
        if result.timed_out:
            raise ExecTimeoutError(self, result)
        return result


def _lifetime(seconds: float) -> float:
    value = validate_timeout_s(seconds, "timeout")
    if value > MAX_SANDBOX_TIMEOUT_S:
        raise ValueError(
            f"timeout {value:g} s is longer than a session may live ({MAX_SANDBOX_TIMEOUT_S:g} s, ACR's maximum)"
        )
    return value


def _sandbox_session_id(session_id: str) -> str:
    if not isinstance(session_id, str) or not is_sandbox_session(session_id):
        raise ValueError(
            f"sandbox session ids start with {SANDBOX_SESSION_PREFIX!r} (the trainer may write only such sessions' "
            f"records); got {session_id!r}"
        )
    if not SESSION_ID_MIN_LENGTH <= len(session_id) <= SESSION_ID_MAX_LENGTH:
        raise ValueError(
            f"session_id must be {SESSION_ID_MIN_LENGTH}-{SESSION_ID_MAX_LENGTH} characters, got {len(session_id)}"
        )
    return session_id


def _our_descriptor(
    runtime_arn: str, experiment: str | None, region: str | None, ssm: SSMClient | None
) -> ExperimentDescriptor | None:
    """The descriptor of the experiment ``runtime_arn`` belongs to, or ``None`` when it is none of ours.

    ``experiment`` given: its descriptor, which must exist. Else the experiment the runtime's name says
    (``rollout_<experiment>-...``), when SSM holds its descriptor.
    """
    if experiment is not None:
        return load_descriptor(experiment, region=region, ssm=ssm)
    named = experiment_of_runtime(runtime_arn)
    if named is None:
        return None
    try:
        return load_descriptor(named, region=region, ssm=ssm)
    except ExperimentNotFoundError:
        return None


def _check_descriptor(descriptor: ExperimentDescriptor, runtime_arn: str, qualifier: str) -> None:
    if descriptor.kind is not ExperimentKind.SANDBOX:
        raise ValueError(
            f"experiment {descriptor.exp_id!r} hosts an agent, not sandboxes: deploy a sandbox experiment "
            "(npx cdk deploy -c experiment=NAME -c sandbox=true, or the local stack's sandbox_settings) and use it"
        )
    if descriptor.runtime_arn != runtime_arn:
        raise ValueError(f"experiment {descriptor.exp_id!r} runs runtime {descriptor.runtime_arn}, not {runtime_arn}")
    if qualifier != descriptor.runtime_qualifier:
        raise ValueError(
            f"qualifier {qualifier!r}: experiment {descriptor.exp_id!r}'s budgets cover endpoint "
            f"{descriptor.runtime_qualifier!r} only"
        )
