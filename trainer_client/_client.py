"""``RolloutClient``: submit rollouts to an experiment and collect their results as events."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError
from botocore.exceptions import ClientError as BotoClientError
from typing_extensions import Unpack

from rollout_contract import (
    CancelRequest,
    DispatchRequest,
    ExperimentDescriptor,
    ExperimentResources,
    ObjectCreated,
    ResultKey,
    Status,
    join_exp_id,
    new_session_id,
    parse_dispatch_message,
    parse_result_key,
    payload_ref_key,
    split_exp_id,
    validate_experiment,
    validate_input_id,
    validate_rollout_session_id,
    validate_session_id,
)
from rollout_contract.aws import ClientFactory, new_session
from rollout_contract.messages import DEFAULT_QUEUE_TIMEOUT_S, SQS_MAX_INLINE_PAYLOAD_BYTES, validate_timeout_s
from rollout_contract.proof import UnprovenResults
from rollout_contract.protocol import region_of_arn
from rollout_contract.retry import RetryPolicy
from rollout_contract.sessions import SessionRecord
from trainer_client._aws import AwsClients, aws_call, load_descriptor, not_found_message
from trainer_client._batch import AsyncBatchResult, BatchResult, BatchSettings
from trainer_client._config import (
    DEFAULT_POLL,
    DEFAULT_ROLLOUT_TIMEOUT_S,
    DEFAULT_TRACES,
    PollSettings,
    RolloutDefaults,
    RolloutOptions,
    TraceSettings,
    require_fields,
    rollout_fields,
)
from trainer_client._deadlines import DeadlineWatch
from trainer_client._exceptions import AwsError, ExperimentNotFoundError, SubmitError
from trainer_client._future import RolloutFuture
from trainer_client._grpo import FailurePolicy, RolloutGroup, iter_groups, iter_groups_async
from trainer_client._journal import Journal, read_journal_entries
from trainer_client._owners import Ownership
from trainer_client._poller import CompletionPoller
from trainer_client._results import ClientResult, TokenTrace
from trainer_client._sessions import (
    InFlightView,
    check_in_flight,
    in_flight_sessions,
    queued_sessions,
    send_cancels,
    session_record,
)
from trainer_client._status import ExperimentStatus, iter_results, read_status
from trainer_client._stored import ResultReader
from trainer_client._traces import TraceReader, session_base_url
from trainer_client._validate import check_json, check_payload

if TYPE_CHECKING:
    import httpx
    from types_boto3_bedrock_agentcore import BedrockAgentCoreClient
    from types_boto3_s3 import S3Client
    from types_boto3_ssm import SSMClient

    from trainer_client._gateway_auth import GatewayAuth

__all__ = ["RolloutClient"]

logger = logging.getLogger("trainer_client")

_SQS_BATCH_ENTRIES = 10
_SQS_BATCH_BYTES = 256 * 1024
#: Entries of a batch the dispatch queue refused (``Failed`` in its answer, which botocore does not retry).
SUBMIT_REFUSALS = RetryPolicy(attempts=3, base_delay_s=0.1, max_delay_s=1.0)


class RolloutClient:
    """Submit rollouts to one experiment and receive their results through its completion queue.

    ART's constructor works unchanged for ART's named fields. ``agent_runtime_arn`` names the region (as in
    ART) and is otherwise informational (the dispatcher Lambda invokes the runtime), ``tps_limit`` has no
    effect (the dispatcher enforces one invoke budget for every trainer), ``max_retry_attempts`` and
    ``max_pool_connections`` configure botocore. ``sampling_params``, ``api_key`` and the mapping
    ``rollout_config`` go into each payload's ``_rollout``; any other keyword is a ``TypeError`` (ART forwarded
    it silently). ART's attributes are here: ``agent_runtime_arn``, ``s3_bucket``, ``exp_id``, ``base_url``,
    ``model_id``, ``extra_config`` (the other ``_rollout`` fields), ``region``, ``tps_limit``, ``s3_client``,
    ``agentcore_client``.

    Args:
        agent_runtime_arn: the experiment's AgentCore runtime.
        s3_bucket: the results bucket.
        exp_id: ART's label of the results: the experiment, or ``experiment/run`` for one run of it (results
            under ``{exp_id}/``, ``status`` and ``results`` of this run only; queues and budgets shared).
        max_retry_attempts: botocore retries of a call after its first attempt.
        tps_limit: accepted for ART compatibility; the dispatcher owns the invoke rate.
        max_pool_connections: botocore connection pool size.
        base_url: the model endpoint agents call (``_rollout.base_url``), unless ``gateway_url`` is set.
        model_id: ``_rollout.model_id``.
        gateway_url: a token gateway; each rollout's ``base_url`` becomes its gateway session URL and
            results carry the session's token traces.
        dispatch_queue_url: the dispatch queue (default: looked up by the contract's name).
        completion_queue_url: the completion queue (default: looked up by the contract's name).
        region: AWS region (default: the region of ``agent_runtime_arn``, as ART takes it, else boto3's).
        endpoints: boto3 service name -> endpoint URL (the local stack's).
        clients: ready-made SQS and S3 clients (tests, benchmarks).
        poll: completion poller settings.
        traces: trace reading settings.
        gateway_transport: an ``httpx`` transport for the gateway (tests).
        queue_timeout: seconds a rollout may wait for capacity (session and invoke budgets) before it
            starts; past it, it ends as ``dispatch_failed`` (``QueueWaitExceeded``). Its ``timeout`` runs
            from the start, so a backlog drains at the quota's pace instead of timing out.
        required_rollout_fields: ``_rollout`` fields the experiment's agent needs (the descriptor's); a submit
            without one raises :class:`MissingRolloutFieldError` before anything is sent.
        unproven_results: what to do with a result that carries no proof that the rollout's agent wrote it (D100):
            ``"reject"`` (default: it ends ``agent_error``, "result not written by the rollout's agent", because
            anything holding the runtime role's credentials, model-written code included, can write one) or
            ``"accept"`` (for ART's own agents, which sign nothing; such results are marked
            ``result.provenance == "unproven"``). A result whose proof does not match is refused either way.
        **extra_config: ``sampling_params``, ``api_key``, ``rollout_config`` (see :class:`RolloutDefaults`).

    Raises:
        TypeError: an unknown keyword.
        rollout_contract.InvalidIdError: an ``exp_id`` the contract refuses (the message names the rule): it must
            start with an experiment name (lowercase, it names AWS resources); the run after ``/`` is free.
        ExperimentNotFoundError: the experiment's queues do not exist.
        AwsError: looking the queues up failed otherwise.
    """

    def __init__(
        self,
        agent_runtime_arn: str,
        s3_bucket: str,
        exp_id: str,
        max_retry_attempts: int = 5,
        tps_limit: float = 25,
        max_pool_connections: int = 10,
        base_url: str | None = None,
        model_id: str | None = None,
        *,
        gateway_url: str | None = None,
        dispatch_queue_url: str | None = None,
        completion_queue_url: str | None = None,
        region: str | None = None,
        endpoints: Mapping[str, str] | None = None,
        clients: AwsClients | None = None,
        poll: PollSettings = DEFAULT_POLL,
        traces: TraceSettings = DEFAULT_TRACES,
        gateway_transport: httpx.BaseTransport | None = None,
        queue_timeout: float = DEFAULT_QUEUE_TIMEOUT_S,
        required_rollout_fields: Sequence[str] = (),
        unproven_results: UnprovenResults | str = UnprovenResults.REJECT,
        **extra_config: Unpack[RolloutDefaults],
    ) -> None:
        rollout = rollout_fields({"base_url": base_url, "model_id": model_id, **extra_config}, "RolloutClient()")
        self.experiment, self.run = split_exp_id(exp_id)
        self.exp_id = exp_id
        self.queue_timeout = validate_timeout_s(queue_timeout, "queue_timeout")
        self.agent_runtime_arn = agent_runtime_arn
        self.s3_bucket = s3_bucket
        self.tps_limit = tps_limit
        self.base_url = base_url
        self.model_id = model_id
        self.extra_config = {k: v for k, v in rollout.items() if k not in ("base_url", "model_id")}
        self.region: str | None = region or region_of_arn(agent_runtime_arn) or new_session().region_name
        self.resources = ExperimentResources.for_experiment(self.experiment)
        self._factory = ClientFactory(
            region=self.region,
            endpoints=endpoints or {},
            max_attempts=max_retry_attempts + 1,
            max_pool_connections=max(max_pool_connections, poll.fetch_workers + poll.receivers + 1),
        )
        self._clients = clients or AwsClients.build(self._factory)
        self._agentcore_client: BedrockAgentCoreClient | None = None
        secretsmanager = self._clients.secretsmanager or self._factory.client("secretsmanager")
        self._reader = ResultReader(
            self._clients.s3, secretsmanager, s3_bucket, self.experiment, _unproven_setting(unproven_results)
        )
        self._secretsmanager = secretsmanager
        self._gateway_auth: GatewayAuth | None = None
        self.dispatch_queue_url = dispatch_queue_url or self._queue_url(self.resources.dispatch_queue.name)
        self.completion_queue_url = completion_queue_url or self._queue_url(self.resources.completion_queue.name)
        self.gateway_url = gateway_url
        self.required_rollout_fields = tuple(required_rollout_fields)
        self._rollout_defaults = rollout
        self._traces = (
            TraceReader(
                gateway_url, traces, transport=gateway_transport, workers=poll.fetch_workers, auth=self.gateway_auth
            )
            if gateway_url
            else None
        )
        #: This client's trainer id: the dispatcher records it on each rollout it submits (see ``_owners``).
        self.trainer_id = uuid.uuid4().hex
        dynamodb, table = self._clients.dynamodb, self.resources.sessions_table.name
        self._ownership = (
            Ownership(
                dynamodb, table, trainer_id=self.trainer_id, lease_s=poll.lease_s, lease_cache_s=poll.lease_cache_s
            )
            if dynamodb is not None
            else None
        )
        self._poller = CompletionPoller(
            self._clients.sqs,
            self.completion_queue_url,
            self._load_event,
            poll,
            name=f"rollouts-poller-{exp_id}",
            ownership=self._ownership,
        )
        self._deadlines = (
            DeadlineWatch(
                dynamodb,
                table,
                exp_id=self.exp_id,
                read_stored=self._read_key,
                settle=self._settle,
                grace_s=poll.deadline_grace_s,
                reads_per_s=poll.fallback_reads_per_s,
            )
            if dynamodb is not None
            else None
        )
        self.poll_settings = poll

    @classmethod
    def for_experiment(
        cls,
        exp_id: str,
        *,
        run: str | None = None,
        region: str | None = None,
        ssm: SSMClient | None = None,
        **kwargs: Any,
    ) -> RolloutClient:
        """Connect to experiment ``exp_id`` using the descriptor its stack published in SSM.

        Starting a run costs no deploy and no AWS call beyond this descriptor read: the run is a label in
        the exp_id (``experiment/run``) of the rollouts this client submits.

        Args:
            exp_id: the experiment's name.
            run: a run of the experiment (a free label: letters, digits, ``.``, ``_``, ``~``, ``-``, ``/``);
                results go under ``{experiment}/{run}/``, and ``status``/``results`` see this run only.
            region: AWS region of the descriptor (default: boto3's).
            ssm: an SSM client (default: a new one; ``AWS_ENDPOINT_URL_SSM`` points it at a local stack).
            **kwargs: more constructor arguments (``base_url``, ``poll``, ``sampling_params``, ...).

        Raises:
            ExperimentNotFoundError: no descriptor for ``exp_id``; the message says how to create one.
        """
        descriptor = load_descriptor(validate_experiment(exp_id), region=region, ssm=ssm)
        return cls.from_descriptor(descriptor, run=run, **kwargs)

    @classmethod
    def from_descriptor(
        cls, descriptor: ExperimentDescriptor, *, run: str | None = None, **kwargs: Any
    ) -> RolloutClient:
        """Connect to the experiment ``descriptor`` describes, or to its ``run`` (``kwargs`` override its values;
        one given as ``None`` keeps the descriptor's).

        The descriptor's ``model_id`` is the default model name, its ``required_rollout_fields`` are checked
        on every submit, and its ``unproven_results`` is what the client does with a result its agent did not sign.
        """
        options: dict[str, Any] = {
            "dispatch_queue_url": descriptor.dispatch_queue_url,
            "completion_queue_url": descriptor.completion_queue_url,
            "region": descriptor.region,
            "endpoints": descriptor.endpoints,
            "gateway_url": descriptor.gateway_url,
            "model_id": descriptor.model_id,
            "required_rollout_fields": descriptor.required_rollout_fields,
            "unproven_results": descriptor.unproven_results,
        }
        options.update((key, value) for key, value in kwargs.items() if value is not None or key not in options)
        return cls(descriptor.runtime_arn, descriptor.results_bucket, join_exp_id(descriptor.exp_id, run), **options)

    @property
    def s3_client(self) -> S3Client:
        """The boto3 S3 client results are read with (ART's attribute)."""
        return self._clients.s3

    @property
    def agentcore_client(self) -> BedrockAgentCoreClient:
        """A boto3 ``bedrock-agentcore`` client in the runtime's region (ART's attribute; built on first use).

        The dispatcher invokes and the finisher stops sessions, so this client uses it for nothing itself.
        """
        if self._agentcore_client is None:
            self._agentcore_client = self._factory.client("bedrock-agentcore")
        return self._agentcore_client

    @property
    def gateway_auth(self) -> GatewayAuth:
        """The token gateway's admin credential as ``httpx`` auth (``Authorization: Bearer``, read again on a 401):
        its admin and trace routes need it (D100). ``httpx.Client(auth=client.gateway_auth)``; for rLLM's
        ``GatewayClient``: ``gateway_client._http.auth = client.gateway_auth``."""
        if self._gateway_auth is None:
            from trainer_client._gateway_auth import GatewayAuth  # httpx: imported only by clients that use a gateway

            self._gateway_auth = GatewayAuth.admin(self._secretsmanager, self.experiment)
        return self._gateway_auth

    def probe_gateway(self) -> TokenTrace | None:
        """One one-token model call through the gateway (``model_id``) in a session of its own; the trace the
        gateway recorded for it (``None`` if none). The adapters check with it, before any rollout, that the
        servers return what training asks for (MoE routing).

        Raises:
            ValueError: the client has no gateway.
            httpx.HTTPError: the call failed.
        """
        if self._traces is None:
            raise ValueError(f"experiment {self.exp_id!r} has no token gateway: pass gateway_url= or deploy with one")
        return self._traces.probe(self.model_id)

    @property
    def pending_count(self) -> int:
        """How many rollouts of this client have no result yet."""
        return self._poller.pending_count

    def cancel_pending(self) -> int:
        """Cancel every rollout of this client that has no result yet (as :meth:`RolloutFuture.cancel` does).

        Returns:
            How many were cancelled.

        Raises:
            SubmitError: a cancel request could not be sent.
        """
        return sum(future.cancel() for future in self._poller.pending())

    # Submitting

    def invoke(
        self,
        payload: Mapping[str, Any],
        session_id: str | None = None,
        input_id: str | None = None,
        timeout: float = DEFAULT_ROLLOUT_TIMEOUT_S,
        **overrides: Unpack[RolloutOptions],
    ) -> RolloutFuture:
        """Start one rollout and return its future at once.

        Args:
            payload: the agent's payload (a JSON object).
            session_id: the rollout id (default: a new uuid4); 33-256 key-safe characters.
            input_id: the group (prompt) id (default: the session id, a group of one).
            timeout: seconds the rollout may run once started; after that the sweeper ends it as ``timed_out``.
            **overrides: ``_rollout`` fields for this rollout only: ``base_url``, ``model_id``,
                ``sampling_params``, ``api_key``, and any others in the mapping ``rollout_config``.

        Raises:
            SubmitError: the dispatch queue did not accept the request, or a payload too large for a
                message could not be uploaded to S3.
            rollout_contract.InvalidIdError: a ``session_id`` or ``input_id`` the contract refuses, before
                anything is sent (the message names the rule).
            TypeError: an unknown keyword (see :class:`RolloutOptions`).
            MissingRolloutFieldError: a ``_rollout`` field the experiment's agent needs is given nowhere.
        """
        future = self.submit([(payload, input_id)], session_ids=[session_id], timeout=timeout, **overrides)[0]
        error = future.exception() if future.done() else None
        if isinstance(error, SubmitError):
            raise error
        return future

    async def invoke_async(
        self,
        payload: Mapping[str, Any],
        session_id: str | None = None,
        input_id: str | None = None,
        timeout: float = DEFAULT_ROLLOUT_TIMEOUT_S,
        **overrides: Unpack[RolloutOptions],
    ) -> RolloutFuture:
        """:meth:`invoke` without blocking the event loop."""
        return await asyncio.to_thread(self.invoke, payload, session_id, input_id, timeout, **overrides)

    def submit(
        self,
        items: Sequence[tuple[Mapping[str, Any], str | None]],
        *,
        session_ids: Sequence[str | None] | None = None,
        timeout: float = DEFAULT_ROLLOUT_TIMEOUT_S,
        journal: str | Path | None = None,
        **overrides: Unpack[RolloutOptions],
    ) -> list[RolloutFuture]:
        """Start many rollouts with batched sends (10 per call) and return their futures in order.

        Args:
            items: ``(payload, input_id)`` pairs; ``input_id`` ``None`` means the session id.
            session_ids: rollout ids, parallel to ``items`` (default: new ones).
            timeout: seconds each rollout may run.
            journal: append the rollouts' result keys to this file before sending them (write-ahead), so a
                process that restarts can :meth:`attach_journal` them.
            **overrides: ``_rollout`` fields for these rollouts.

        A request the queue refuses fails its future with :class:`SubmitError` instead of raising.

        Raises:
            MissingRolloutFieldError: a ``_rollout`` field the experiment's agent needs is given nowhere (before
                anything is sent).
        """
        fields = rollout_fields(overrides, "submit()")
        timeout = validate_timeout_s(timeout)
        check_json(fields, "_rollout overrides")
        writer = Journal(journal) if journal is not None else None
        session_ids = session_ids or [None] * len(items)
        requests: list[DispatchRequest] = []
        for (payload, input_id), session_id in zip(items, session_ids, strict=True):
            requests.append(self._request(payload, session_id, input_id, timeout, fields))
        futures = [self._future(request) for request in requests]
        self._poller.register_all(futures)
        for request, future in zip(requests, futures, strict=True):
            self._watch(future, request)
        given = [future for future, session_id in zip(futures, session_ids, strict=True) if session_id is not None]
        stored = self._resolve_stored(given)
        to_send = [(r, f) for r, f in zip(requests, futures, strict=True) if f not in stored]
        if writer is not None:
            writer.record(request for request, _ in to_send)
        self._send([r for r, _ in to_send], [f for _, f in to_send], writer)
        return futures

    def _request(
        self,
        payload: Mapping[str, Any],
        session_id: str | None,
        input_id: str | None,
        timeout: float,
        fields: Mapping[str, Any],
    ) -> DispatchRequest:
        payload = check_payload(payload)
        session_id = validate_rollout_session_id(session_id) if session_id is not None else new_session_id()
        input_id = validate_input_id(input_id) if input_id is not None else session_id
        rollout = {**self._rollout_defaults, **fields}
        if self.gateway_url:
            rollout["base_url"] = session_base_url(self.gateway_url, session_id)
        require_fields(rollout, self.required_rollout_fields, self.exp_id)
        request = DispatchRequest(
            exp_id=self.exp_id,
            input_id=input_id,
            session_id=session_id,
            trainer=self.trainer_id,
            payload=payload,
            rollout=rollout,
            timeout_s=timeout,
            queue_timeout_s=self.queue_timeout,
        )
        if len(request.to_body().encode()) <= SQS_MAX_INLINE_PAYLOAD_BYTES:
            return request
        ref = payload_ref_key(self.exp_id, session_id)
        try:
            self._clients.s3.put_object(Bucket=self.s3_bucket, Key=ref, Body=json.dumps(request.payload).encode())
        except (BotoCoreError, BotoClientError) as exc:
            raise SubmitError(
                f"could not upload the payload of rollout {session_id} to s3://{self.s3_bucket}/{ref}: {exc}"
            ) from exc
        return request.model_copy(update={"payload": None, "payload_ref": ref})

    def _future(self, request: DispatchRequest) -> RolloutFuture:
        return RolloutFuture(request.key, self.s3_bucket, deadline_at=request.deadline_at, on_cancel=self._send_cancel)

    def _send(
        self,
        requests: Sequence[DispatchRequest],
        futures: Sequence[RolloutFuture],
        journal: Journal | None = None,
    ) -> None:
        """Send requests in batches, retrying the entries the queue refused (:data:`SUBMIT_REFUSALS`; a call that
        failed, botocore retried already); what fails for good fails its future with ``SubmitError``."""
        entries = {
            request.session_id: (str(request.key), request.to_body(), future)
            for request, future in zip(requests, futures, strict=True)
        }
        pending, failed = list(entries), dict[str, str]()
        for attempt in range(1, SUBMIT_REFUSALS.attempts + 1):
            refused: dict[str, str] = {}
            for chunk in _chunks([(sid, entries[sid][1]) for sid in pending]):
                try:
                    response = self._clients.sqs.send_message_batch(
                        QueueUrl=self.dispatch_queue_url,
                        Entries=[{"Id": str(i), "MessageBody": body} for i, (_, body) in enumerate(chunk)],
                    )
                except (BotoCoreError, BotoClientError) as exc:
                    failed.update((sid, str(exc)) for sid, _ in chunk)
                    continue
                in_chunk = {
                    chunk[int(entry["Id"])][0]: f"{entry.get('Code')}: {entry.get('Message')}"
                    for entry in response.get("Failed", [])
                }
                refused.update(in_chunk)
                if journal is not None:
                    journal.mark_sent(entries[sid][0] for sid, _ in chunk if sid not in in_chunk)
            pending = list(refused)
            if not pending:
                break
            logger.warning("dispatch queue refused %d request(s) (attempt %d)", len(pending), attempt)
            if attempt < SUBMIT_REFUSALS.attempts:
                time.sleep(SUBMIT_REFUSALS.delay_s(attempt))
            else:
                failed.update(refused)
        if journal is not None and failed:
            journal.mark_refused(entries[sid][0] for sid in failed)
        for sid, reason in failed.items():
            self._poller.fail(entries[sid][2], SubmitError(f"dispatch queue refused rollout {sid}: {reason}"))

    def _resolve_stored(self, futures: Sequence[RolloutFuture]) -> set[RolloutFuture]:
        """Resolve the futures whose result is already stored (e.g. a session id used before); return them."""
        resolved = set()
        for future, result in zip(futures, self._poller.map(self._read_stored, futures), strict=True):
            if result is not None:
                logger.info("rollout %s already has a stored result; resolved with it", future.result_key)
                self._poller.resolve(future, result)
                resolved.add(future)
        return resolved

    def _send_cancel(self, future: RolloutFuture) -> None:
        if future.input_id is None:
            raise ValueError(f"rollout {future.session_id} was attached by session id alone; cancel needs its input id")
        request = CancelRequest(
            exp_id=self.exp_id, input_id=future.input_id, session_id=future.session_id, trainer=self.trainer_id
        )
        try:
            self._clients.sqs.send_message(QueueUrl=self.dispatch_queue_url, MessageBody=request.to_body())
        except (BotoCoreError, BotoClientError) as exc:
            raise SubmitError(f"could not send the cancel request of rollout {future.session_id}: {exc}") from exc

    # Collecting

    def attach(self, rollouts: Iterable[str | ResultKey]) -> list[RolloutFuture]:
        """Collect results of rollouts submitted earlier, e.g. by a process that restarted.

        The rollouts become this client's first (their result events come here from now on, see
        ``trainer_client._owners``); then each result already stored is read once (GetObject), and the
        others arrive as events, or are read once their deadline has passed.

        Args:
            rollouts: result keys (``exp_id/input_id/session_id.json`` or :class:`ResultKey`) or bare
                session ids (these wait for their event only: without the input id there is no key).

        Raises:
            ValueError: a key of another experiment.
            AwsError: the rollouts could not be claimed, or a stored result could not be read.
        """
        keys = []
        for rollout in rollouts:
            key = rollout if isinstance(rollout, ResultKey) else _parse_rollout(rollout, self.exp_id)
            if key.exp_id != self.exp_id:
                raise ValueError(f"{key} belongs to exp_id {key.exp_id!r}, not this client's {self.exp_id!r}")
            keys.append(key)
        return self._attach(keys, {})

    def _attach(self, keys: Sequence[ResultKey], requests: Mapping[str, DispatchRequest]) -> list[RolloutFuture]:
        """Own, claim and read ``keys``; ``requests`` (by session id) say when each rollout is due at the latest."""
        futures = [
            RolloutFuture(key, self.s3_bucket, on_cancel=self._send_cancel if key.input_id else None) for key in keys
        ]
        self._poller.register_all(futures, finished_ok=True)
        if self._ownership is not None:
            with aws_call(f"claiming {len(futures)} rollout(s) of experiment {self.exp_id!r} for this client"):
                self._ownership.claim(future.session_id for future in futures)
        self._resolve_stored([future for future in futures if future.input_id])
        now = time.time()
        for future in futures:
            request = requests.get(future.session_id)
            if request is not None:
                future.deadline_at = request.deadline_at
            self._watch(future, request, attached_at=now)
        return futures

    def attach_journal(self, path: str | Path) -> list[RolloutFuture]:
        """:meth:`attach` every rollout recorded in a journal written by ``submit``, ``run_batch`` or ``eval``.

        Requests the journal does not show as sent are sent again (the dispatcher starts a rollout at most
        once, so resending one that did arrive changes nothing); those the queue refused fail at once with
        :class:`SubmitError`; those an interrupted eval marked cancelled are not attached (its resume runs
        their samples again).
        """
        entries = [entry for entry in read_journal_entries(path) if not entry.cancelled]
        requests: dict[str, DispatchRequest] = {}
        for entry in entries:
            request = parse_dispatch_message(entry.request) if entry.request is not None else None
            if isinstance(request, DispatchRequest):
                # A resent request names this client as its trainer (the claim above made it so already).
                requests[request.session_id] = request.model_copy(update={"trainer": self.trainer_id})
        futures = self._attach([entry.key for entry in entries], requests)
        unsent: list[tuple[DispatchRequest, RolloutFuture]] = []
        for entry, future in zip(entries, futures, strict=True):
            if future.done():
                continue
            if entry.refused:
                self._poller.fail(future, SubmitError(f"the dispatch queue refused rollout {future.session_id}"))
            elif not entry.sent and future.session_id in requests:
                unsent.append((requests[future.session_id], future))
        if unsent:
            logger.warning("journal %s: resending %d request(s) not known to be sent", path, len(unsent))
            self._send([r for r, _ in unsent], [f for _, f in unsent], Journal(path))
        return futures

    def _watch(self, future: RolloutFuture, request: DispatchRequest | None, *, attached_at: float = 0.0) -> None:
        """Have the deadline fallback check ``future`` if its event has not come by its deadline (+ grace)."""
        if self._deadlines is None:
            return
        if request is not None:
            timing = {"timeout_s": request.timeout_s, "submitted_at": request.submitted_at}
            self._deadlines.watch(future, latest=request.deadline_at, **timing)
            return
        latest = attached_at + DEFAULT_QUEUE_TIMEOUT_S + DEFAULT_ROLLOUT_TIMEOUT_S
        self._deadlines.watch(future, timeout_s=None, submitted_at=attached_at, latest=latest)

    def _settle(self, future: RolloutFuture, outcome: ClientResult | BaseException) -> None:
        if isinstance(outcome, BaseException):
            self._poller.fail(future, outcome)
        else:
            self._poller.resolve(future, outcome)

    def _read_stored(self, future: RolloutFuture) -> ClientResult | None:
        return self._read_key(future.result_key) if future.result_key else None

    def _read_key(self, key: str) -> ClientResult | None:
        """The result stored at ``key`` with its traces, or ``None`` when none is stored (S3's 403 rule included)."""
        with aws_call(f"reading s3://{self.s3_bucket}/{key}"):
            result = self._reader.read_if_stored(key)
        return self._with_traces(result) if result is not None else None

    def _load_event(self, event: ObjectCreated) -> ClientResult:
        # The event names the session: read its token traces while the result object is read.
        traces = self._traces.start(event.result_key.session_id) if self._traces is not None else None
        result = self._reader.read(event.key)
        if traces is not None:
            result.token_traces = traces.result()
        return result

    def _with_traces(self, result: ClientResult) -> ClientResult:
        if self._traces is not None:
            result.token_traces = self._traces.read(result.session_id)
        return result

    # Batches and groups

    def run_batch(
        self,
        payloads: Iterable[Mapping[str, Any]],
        max_concurrent_sessions: int,
        timeout: float = DEFAULT_ROLLOUT_TIMEOUT_S,
        initial_interval: float = 0.5,
        max_interval: float = 30.0,
        backoff_factor: float = 1.5,
        log_interval: float = 30.0,
        *,
        input_ids: Iterable[str | None] | None = None,
        journal: str | Path | None = None,
        **overrides: Unpack[RolloutOptions],
    ) -> BatchResult:
        """Run payloads with at most ``max_concurrent_sessions`` in flight; yield items as they complete.

        Args:
            payloads: agent payloads (consumed lazily).
            max_concurrent_sessions: rollouts in flight at most.
            timeout: seconds each rollout may run (its server-side deadline).
            initial_interval: ART's first S3 poll interval; no effect (completion is an event here).
            max_interval: ART's poll interval cap; no effect.
            backoff_factor: ART's poll interval growth; no effect.
            log_interval: seconds between ``[Status]`` log lines while rollouts are in flight (ART's).
            input_ids: group ids parallel to ``payloads`` (default: one group per payload).
            journal: append each submitted result key to this file (see :meth:`attach_journal`).
            **overrides: ``_rollout`` fields for every rollout.

        Returns:
            A :class:`BatchResult`: :class:`BatchItem` in completion order; ``success`` means status ``succeeded``.
        """
        settings = BatchSettings(
            max_concurrent_sessions=max_concurrent_sessions, timeout=timeout, journal=journal,
            overrides=_checked(overrides, "run_batch()"), initial_interval=initial_interval,
            max_interval=max_interval, backoff_factor=backoff_factor, log_interval=log_interval,
        )  # fmt: skip
        return BatchResult(self, _pairs(payloads, input_ids), settings)

    def run_batch_async(
        self,
        payloads: Iterable[Mapping[str, Any]],
        max_concurrent_sessions: int,
        timeout: float = DEFAULT_ROLLOUT_TIMEOUT_S,
        initial_interval: float = 0.5,
        max_interval: float = 30.0,
        backoff_factor: float = 1.5,
        log_interval: float = 30.0,
        *,
        input_ids: Iterable[str | None] | None = None,
        journal: str | Path | None = None,
        **overrides: Unpack[RolloutOptions],
    ) -> AsyncBatchResult:
        """:meth:`run_batch` as an async iterator (same arguments)."""
        settings = BatchSettings(
            max_concurrent_sessions=max_concurrent_sessions, timeout=timeout, journal=journal,
            overrides=_checked(overrides, "run_batch_async()"), initial_interval=initial_interval,
            max_interval=max_interval, backoff_factor=backoff_factor, log_interval=log_interval,
        )  # fmt: skip
        return AsyncBatchResult(self, _pairs(payloads, input_ids), settings)

    def run_groups(
        self,
        prompts: Iterable[Mapping[str, Any]],
        samples_per_prompt: int,
        max_concurrent_sessions: int,
        timeout: float = DEFAULT_ROLLOUT_TIMEOUT_S,
        *,
        policy: FailurePolicy = FailurePolicy.DROP_GROUP,
        input_ids: Iterable[str] | None = None,
        eps: float = 1e-6,
        journal: str | Path | None = None,
        **overrides: Unpack[RolloutOptions],
    ) -> Iterator[RolloutGroup]:
        """Run ``samples_per_prompt`` rollouts per prompt and yield each complete GRPO group.

        Args:
            prompts: one payload per prompt.
            samples_per_prompt: group size (``n``).
            max_concurrent_sessions: rollouts in flight at most.
            timeout: seconds each rollout may run.
            policy: what to do with groups that have failed members (see :class:`FailurePolicy`).
            input_ids: group ids parallel to ``prompts`` (default: new uuids).
            eps: added to the group's reward std in the advantage denominator.
            journal: append each submitted result key to this file.
            **overrides: ``_rollout`` fields for every rollout.

        Yields:
            :class:`RolloutGroup` with group-normalized advantages, in group completion order.
        """
        options = _checked(overrides, "run_groups()")
        payloads, ids = _expand(prompts, samples_per_prompt, input_ids)
        items = self.run_batch(payloads, max_concurrent_sessions, timeout, input_ids=ids, journal=journal, **options)
        return iter_groups(items, samples_per_prompt, policy, eps)

    def run_groups_async(
        self,
        prompts: Iterable[Mapping[str, Any]],
        samples_per_prompt: int,
        max_concurrent_sessions: int,
        timeout: float = DEFAULT_ROLLOUT_TIMEOUT_S,
        *,
        policy: FailurePolicy = FailurePolicy.DROP_GROUP,
        input_ids: Iterable[str] | None = None,
        eps: float = 1e-6,
        journal: str | Path | None = None,
        **overrides: Unpack[RolloutOptions],
    ) -> AsyncIterator[RolloutGroup]:
        """:meth:`run_groups` as an async iterator (same arguments)."""
        options = _checked(overrides, "run_groups_async()")
        payloads, ids = _expand(prompts, samples_per_prompt, input_ids)
        items = self.run_batch_async(
            payloads, max_concurrent_sessions, timeout, input_ids=ids, journal=journal, **options
        )
        return iter_groups_async(items, samples_per_prompt, policy, eps)

    # Inspecting

    def status(self, recent: int = 0) -> ExperimentStatus:
        """Return queue depths, the number of rollouts in flight and the ``recent`` newest results.

        Of this client's run when it has one (rollouts in flight and results; the queues are the experiment's),
        else of the whole experiment, every run included. The default reads no result: its cost does not grow
        with the run. ``recent`` > 0 lists every result key under the exp_id to find the newest (one
        ListObjectsV2 page per 1,000); a live view that never lists is ``rollouts top`` (``--once --json``).

        Raises:
            AwsError: a queue, the sessions table or the bucket could not be read.
        """
        with aws_call(f"reading the status of {self.exp_id!r}"):
            return read_status(self._clients, self.resources, self._reader, recent, exp_id=self.exp_id)

    def results(self, statuses: Collection[Status | str] | None = None) -> Iterator[ClientResult]:
        """Yield every stored result under this client's exp_id (one GetObject each), optionally only some statuses.

        The exp_id is the experiment's (every run) or one run's (that run, and runs nested under it).

        Raises:
            AwsError: the bucket could not be listed or a result could not be read (while iterating).
        """
        wanted = {Status(status) for status in statuses} if statuses is not None else None
        return self._results(wanted)

    def sessions(self, *, queued: bool = False) -> list[SessionRecord]:
        """The rollouts in flight under this client's exp_id (every trainer's): :meth:`in_flight`'s ``in_flight``."""
        return self.in_flight(queued=queued).in_flight

    def in_flight(self, *, queued: bool = False) -> InFlightView:
        """The rollouts in flight under this client's exp_id (every trainer's), checked against the stored results.

        In flight means holding a session slot (``admitted``, ``running``), soonest deadline first; ``queued``
        adds the rollouts still waiting for capacity, oldest first, at the price of a Scan of the table. The
        sessions table learns of an end after the result is stored (seconds later at a backlog): a rollout it
        lists whose result is stored is in ``ended``, with that result, not in ``in_flight``. The check costs
        one ListObjectsV2 per input id listed and one GetObject per result found (:func:`check_in_flight`).

        Raises:
            AwsError: the sessions table or the bucket could not be read.
        """
        with aws_call(f"reading the sessions of {self.exp_id!r}"):
            records = in_flight_sessions(self._clients.require_dynamodb(), self.resources, self.exp_id)
            if queued:
                records += queued_sessions(self._clients.require_dynamodb(), self.resources, self.exp_id)
        return self.check_ended(records)

    def check_ended(self, records: Sequence[SessionRecord]) -> InFlightView:
        """Split sessions-table records into those whose result is stored (``ended``) and the rest.

        One ListObjectsV2 per input id (at most :data:`~trainer_client._sessions.CHECKED_INPUT_IDS`) and one
        GetObject per result found.

        Raises:
            AwsError: the bucket could not be read.
        """
        with aws_call(f"reading the stored results of {len(records)} rollouts of {self.exp_id!r}"):
            return check_in_flight(self._reader, records, self.exp_id)

    def session(self, session_id: str) -> SessionRecord | None:
        """One rollout's sessions-table item, or ``None`` when no dispatcher recorded ``session_id``.

        Raises:
            AwsError: the sessions table could not be read.
        """
        with aws_call(f"reading rollout {session_id} of {self.exp_id!r}"):
            return session_record(self._clients.require_dynamodb(), self.resources, validate_session_id(session_id))

    def cancel(self, rollouts: Iterable[str | ResultKey]) -> int:
        """Ask the dispatcher to cancel rollouts of this experiment, any trainer's (what ``future.cancel()`` sends).

        Each ends as ``cancelled`` unless it ended first, and the finisher stops its session.

        Args:
            rollouts: result keys (``exp_id/input_id/session_id.json`` or :class:`ResultKey`).

        Returns:
            How many cancel requests were sent.

        Raises:
            ValueError: a key of another experiment.
            SubmitError: the dispatch queue refused some (the message names them).
        """
        keys = [rollout if isinstance(rollout, ResultKey) else parse_result_key(rollout) for rollout in rollouts]
        strangers = [str(key) for key in keys if split_exp_id(key.exp_id)[0] != self.experiment]
        if strangers:
            raise ValueError(f"{', '.join(strangers)} belong to another experiment than {self.experiment!r}")
        try:
            refused = send_cancels(self._clients.sqs, self.dispatch_queue_url, keys)
        except (BotoCoreError, BotoClientError) as exc:
            raise SubmitError(f"could not send cancel requests: {exc}") from exc
        if refused:
            raise SubmitError(f"the dispatch queue refused the cancel requests of {', '.join(refused)}")
        return len(keys)

    def _results(self, wanted: Collection[Status] | None) -> Iterator[ClientResult]:
        with aws_call(f"reading the results of {self.exp_id!r} from s3://{self.s3_bucket}"):
            yield from iter_results(self._reader, self.exp_id, wanted)

    # Lifecycle

    def close(self) -> None:
        """Stop the poller (futures still pending fail with ``ClientClosedError``) and release connections."""
        if self._deadlines is not None:
            self._deadlines.close()
        self._poller.close()
        if self._traces is not None:
            self._traces.close()

    def __enter__(self) -> RolloutClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> RolloutClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await asyncio.to_thread(self.close)

    def _queue_url(self, name: str) -> str:
        try:
            with aws_call(f"looking up the SQS queue {name}"):
                return str(self._clients.sqs.get_queue_url(QueueName=name)["QueueUrl"])
        except AwsError as exc:
            if "NonExistentQueue" in exc.code or "QueueDoesNotExist" in exc.code:
                raise ExperimentNotFoundError(not_found_message(self.experiment, f"no SQS queue {name}")) from exc
            raise


def _checked(overrides: RolloutOptions, where: str) -> RolloutOptions:
    """Check ``overrides`` now (not at the first iteration) and return them as one ``rollout_config``."""
    return {"rollout_config": rollout_fields(overrides, where)}


def _parse_rollout(rollout: str, exp_id: str) -> ResultKey:
    if "/" in rollout:
        return parse_result_key(rollout)
    return ResultKey(exp_id, "", validate_session_id(rollout))


def _pairs(
    payloads: Iterable[Mapping[str, Any]], input_ids: Iterable[str | None] | None
) -> Iterator[tuple[Mapping[str, Any], str | None]]:
    if input_ids is None:
        return ((payload, None) for payload in payloads)
    return zip(payloads, input_ids, strict=True)


def _expand(
    prompts: Iterable[Mapping[str, Any]], samples: int, input_ids: Iterable[str] | None
) -> tuple[list[Mapping[str, Any]], list[str]]:
    if samples < 1:
        raise ValueError(f"samples_per_prompt must be at least 1, got {samples}")
    prompts = list(prompts)
    ids = list(input_ids) if input_ids is not None else [new_session_id() for _ in prompts]
    if len(ids) != len(prompts):
        raise ValueError(f"got {len(ids)} input_ids for {len(prompts)} prompts; give one per prompt")
    payloads = [prompt for prompt in prompts for _ in range(samples)]
    return payloads, [input_id for input_id in ids for _ in range(samples)]


def _chunks(entries: list[tuple[str, str]]) -> Iterator[list[tuple[str, str]]]:
    chunk: list[tuple[str, str]] = []
    size = 0
    for entry in entries:
        entry_size = len(entry[1].encode())
        if chunk and (len(chunk) == _SQS_BATCH_ENTRIES or size + entry_size > _SQS_BATCH_BYTES):
            yield chunk
            chunk, size = [], 0
        chunk.append(entry)
        size += entry_size
    if chunk:
        yield chunk


def _unproven_setting(value: UnprovenResults | str) -> UnprovenResults:
    try:
        return UnprovenResults(value)
    except ValueError:
        choices = ", ".join(repr(choice.value) for choice in UnprovenResults)
        raise ValueError(f"unproven_results={value!r} is not one of {choices}") from None
