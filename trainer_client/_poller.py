"""The completion poller: a client's receiver threads long-poll the completion queue and resolve futures.

Each message is an S3 "Object Created" event for a result object. The poller looks the session id up
among the futures it owns (a dict: O(1)), loads the result in a small thread pool, resolves the
future and deletes the messages in batches. Events for rollouts this process finished recently are
duplicates and are deleted. An event for a rollout it does not own goes back at once (visibility 0) when a
live trainer owns it, and is deleted when none will claim it (:mod:`trainer_client._owners`: its trainer's
lease ran out, or no trainer of ours recorded it, e.g. an ART client's): its result stays in S3 for
``attach``. While it has pending futures the poller keeps its own trainer lease alive. It receives only
while it owns pending futures, so an idle client takes nothing from the queue.

When the queue or the bucket cannot be reached (an outage, revoked credentials, a stopped local stack),
the poller says so once, backs off (1 s doubling to 30 s) and, after ``unavailable_after_s``, fails the
pending futures with :class:`StoreUnavailableError` instead of leaving them waiting forever.

``PollSettings.receivers`` (default 2) threads receive, one long poll at a time: a receiver hands the
listening over as soon as its receive returns, so an event that arrives while it reads its batch's results
is taken by another instead of waiting for that batch to end. No receive starts once every pending future's
event is in hand, so closing the client waits for no long poll.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import InvalidStateError, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, NamedTuple

from botocore.exceptions import BotoCoreError
from botocore.exceptions import ClientError as BotoClientError

from rollout_contract import (
    InvalidIdError,
    InvalidResultError,
    NotAnObjectCreatedEventError,
    ObjectCreated,
    parse_object_created,
)
from trainer_client._config import PollSettings
from trainer_client._exceptions import ClientClosedError, DuplicateSessionError, RolloutError, StoreUnavailableError
from trainer_client._future import RolloutFuture
from trainer_client._owners import Claim, Ownership
from trainer_client._results import ClientResult

if TYPE_CHECKING:
    from types_boto3_sqs import SQSClient
    from types_boto3_sqs.type_defs import MessageTypeDef

__all__ = ["CompletionPoller"]

logger = logging.getLogger("trainer_client")

Loader = Callable[[ObjectCreated], ClientResult]
_AWS_ERRORS = (BotoCoreError, BotoClientError)
_RETRY_PAUSE_S = 1.0
_MAX_RETRY_PAUSE_S = 30.0


class Handled(NamedTuple):
    """What handling one receive did."""

    #: Messages for futures this poller owns.
    owned: int
    #: A result object could not be read (the store may be unreachable): its event goes back to the queue.
    load_failed: bool
    #: Messages handed back to other trainers.
    handed_back: int = 0


class CompletionPoller:
    """Resolve :class:`RolloutFuture` objects from the completion queue.

    Args:
        sqs: a boto3 SQS client.
        queue_url: the experiment's completion queue.
        load: reads the result object an event names (GetObject, traces).
        settings: poll settings.
        name: thread name.
        ownership: this client's lease and whose other events are (``None``: hand back every event of another
            trainer, as before ownership; clients built without DynamoDB).
    """

    def __init__(
        self,
        sqs: SQSClient,
        queue_url: str,
        load: Loader,
        settings: PollSettings,
        *,
        name: str,
        ownership: Ownership | None = None,
    ) -> None:
        self._sqs = sqs
        self._ownership = ownership
        self._queue_url = queue_url
        self._load = load
        self._settings = settings
        self._name = name
        self._pending: dict[str, RolloutFuture] = {}
        self._finished: OrderedDict[str, None] = OrderedDict()
        self._cond = threading.Condition()
        self._closed = False
        #: Receives in progress (one at a time: see ``_may_listen``).
        self._listening = 0
        #: Session ids of pending futures whose events are in a batch being handled.
        self._claimed: set[str] = set()
        #: Batches being handled (``close`` waits for them, not for a long poll).
        self._handling = 0
        #: No receive starts before this (``time.monotonic()``): the pause after other processes' events.
        self._quiet_until = 0.0
        if ownership is not None and settings.lease_s < 2 * settings.wait_time_s:
            # The lease is renewed between receives: it must outlast a long poll with room to spare.
            raise ValueError(
                f"PollSettings.lease_s ({settings.lease_s:g}) must be at least twice wait_time_s "
                f"({settings.wait_time_s}); raise lease_s"
            )
        self._threads: list[threading.Thread] = []
        #: Since when the store has been unreachable (``None``: it is reachable), shared by the receivers.
        self._failing_since: float | None = None
        self._backoff_s = _RETRY_PAUSE_S
        self._health = threading.Lock()
        self._fetchers = ThreadPoolExecutor(settings.fetch_workers, thread_name_prefix=f"{name}-fetch")

    @property
    def pending_count(self) -> int:
        """How many futures wait for a result."""
        return len(self._pending)

    def pending(self) -> list[RolloutFuture]:
        """The futures waiting for a result, at this moment."""
        with self._cond:
            return list(self._pending.values())

    def register_all(self, futures: Sequence[RolloutFuture], *, finished_ok: bool = False) -> None:
        """Own ``futures``: resolve each when its result event arrives.

        Args:
            futures: futures with distinct session ids.
            finished_ok: accept session ids whose futures this poller already finished (``attach`` reads a
                stored result again); a session id still pending is refused either way.

        Raises:
            DuplicateSessionError: a session id appears twice, is pending, or (unless ``finished_ok``) finished.
            ClientClosedError: the client is closed.
        """
        with self._cond:
            if self._closed:
                raise ClientClosedError("the client is closed; create a new one to submit or attach rollouts")
            seen: set[str] = set()
            for future in futures:
                session_id = future.session_id
                if session_id in seen or session_id in self._pending:
                    raise DuplicateSessionError(
                        f"session id {session_id} is already pending in this client; give every rollout its own "
                        "session id (or none: a new one is generated)"
                    )
                if not finished_ok and session_id in self._finished:
                    raise DuplicateSessionError(
                        f"session id {session_id} was used by a rollout of this client that ended; give every "
                        "rollout its own session id, or read the stored result with client.attach"
                    )
                seen.add(session_id)
            for future in futures:
                self._pending[future.session_id] = future
            if not self._threads:
                self._threads = [
                    threading.Thread(target=self._run, args=(index,), name=f"{self._name}-{index}", daemon=True)
                    for index in range(self._settings.receivers)
                ]
                for thread in self._threads:
                    thread.start()
            self._cond.notify_all()
        self._keep_alive()
        for future in futures:
            future.add_done_callback(self._forget)

    def resolve(self, future: RolloutFuture, result: ClientResult) -> None:
        """Resolve ``future`` with ``result`` unless it is already done (cancelled, or a duplicate)."""
        try:
            future.set_result(result)
        except InvalidStateError:
            return

    def fail(self, future: RolloutFuture, error: BaseException) -> None:
        """Fail ``future`` with ``error`` unless it is already done."""
        try:
            future.set_exception(error)
        except InvalidStateError:
            return

    def map(self, function: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[Any]:
        """Apply ``function`` to ``items`` in the fetch pool; results in order."""
        return self._fetchers.map(function, items)

    def _forget(self, future: RolloutFuture) -> None:
        with self._cond:
            self._pending.pop(future.session_id, None)
            self._claimed.discard(future.session_id)
            self._finished[future.session_id] = None
            if len(self._finished) > self._settings.remember:
                self._finished.popitem(last=False)

    def close(self) -> None:
        """Stop polling and fail futures still pending with :class:`ClientClosedError`; returns at once.

        A receiver handling a batch it received is waited for (its futures resolve, its messages are deleted);
        one waiting for futures ends now. One inside a long poll is not waited for: it ends when its receive
        returns (``wait_time_s`` at most) and hands back whatever that receive brought, so another trainer
        process (or a later ``attach``) gets it. In a process that exits first, such a message comes back
        after the completion queue's visibility timeout.
        """
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
            self._cond.wait_for(lambda: not self._handling, timeout=self._settings.wait_time_s + 10)
            pending = list(self._pending.values())
        for future in pending:
            self.fail(future, ClientClosedError(f"client closed before rollout {future.session_id} ended"))
        self._fetchers.shutdown(wait=False)
        if self._ownership is not None:
            self._ownership.release()

    def _run(self, index: int) -> None:
        """One receiver's loop: listen when it may (see :meth:`_may_listen`), then handle what came."""
        while True:
            with self._cond:
                while not self._closed and not self._may_listen(index):
                    self._cond.wait(max(0.0, self._quiet_until - time.monotonic()) or None)
                if self._closed:
                    return
                self._listening += 1
            started = time.monotonic()
            try:
                messages = self._receive()
            except _AWS_ERRORS as exc:
                with self._cond:
                    self._listening -= 1
                    self._cond.notify_all()
                if self._closed:
                    return
                self._store_failed(exc)
                continue
            try:
                handled = self._handle(messages, listened=True)
            except _AWS_ERRORS as exc:
                if self._closed:
                    return
                self._store_failed(exc)
                continue
            if self._closed:
                return
            if handled.load_failed:
                self._store_failed(None)
                continue
            self._store_reachable(started)
            self._keep_alive()
            if handled.handed_back and not handled.owned:
                with self._cond:
                    self._quiet_until = time.monotonic() + self._settings.idle_backoff_s

    def _keep_alive(self) -> None:
        """Renew this client's trainer lease when due (a failed renewal is retried after the next receive)."""
        if self._ownership is None:
            return
        try:
            self._ownership.keep_alive()
        except _AWS_ERRORS as exc:
            logger.warning("completion poller: could not renew the trainer lease (%s); retrying", exc)

    def _may_listen(self, index: int) -> bool:
        """Whether receiver ``index`` may start a receive now (called under the lock).

        One receive at a time, and only while some pending future's event is not already in a batch being
        handled: a receiver hands the listening over as soon as its receive returns, so an event that arrives
        while it reads its batch's results is taken at once, and when the last events are in hand no receive
        is left open (closing the client then waits for no long poll). While the store is unreachable only
        receiver 0 keeps trying it; after a batch of other processes' events the receivers wait
        ``idle_backoff_s``.
        """
        return (
            not self._listening
            and len(self._pending) > len(self._claimed)
            and not (index and self._failing_since is not None)
            and time.monotonic() >= self._quiet_until
        )

    def _store_failed(self, exc: BaseException | None) -> None:
        """Back off after a failed receive or read; past ``unavailable_after_s``, fail what is pending."""
        now = time.monotonic()
        with self._health:
            if self._failing_since is None:
                self._failing_since = now
                self._backoff_s = _RETRY_PAUSE_S
                cause = f"{type(exc).__name__}: {exc}" if exc is not None else "a result object could not be read"
                logger.warning(
                    "completion poller: cannot reach the completion queue or the results bucket (%s); retrying "
                    "with backoff, pending rollouts fail if this lasts %.0f s",
                    cause,
                    self._settings.unavailable_after_s,
                )
            else:
                self._backoff_s = min(_MAX_RETRY_PAUSE_S, self._backoff_s * 2)
            down_s, pause_s = now - self._failing_since, self._backoff_s
        if down_s >= self._settings.unavailable_after_s:
            self._fail_pending(down_s)
        self._pause(pause_s)

    def _fail_pending(self, down_s: float) -> None:
        with self._cond:
            pending = list(self._pending.values())
        if pending:
            logger.error(
                "completion poller: store unreachable for %.0f s; failing %d pending rollout(s)", down_s, len(pending)
            )
        for future in pending:
            self.fail(
                future,
                StoreUnavailableError(
                    f"no result for rollout {future.session_id}: the completion queue or results bucket was "
                    f"unreachable for {down_s:.0f} s (is the stack or the network down, or were the "
                    "credentials revoked?); once it is back, client.attach collects stored results"
                ),
            )

    def _store_reachable(self, receive_started: float) -> None:
        """A receive that began after the store failed succeeded: say so and wake the other receivers."""
        with self._health:
            if self._failing_since is None or receive_started < self._failing_since:
                return
            down_s, self._failing_since = time.monotonic() - self._failing_since, None
        logger.warning("completion poller: the store is reachable again after %.0f s", down_s)
        with self._cond:
            self._cond.notify_all()

    def _pause(self, seconds: float) -> None:
        with self._cond:
            if not self._closed:
                self._cond.wait(seconds)

    def _receive(self) -> list[MessageTypeDef]:
        response = self._sqs.receive_message(
            QueueUrl=self._queue_url,
            MaxNumberOfMessages=self._settings.max_messages,
            WaitTimeSeconds=self._settings.wait_time_s,
            MessageSystemAttributeNames=["SentTimestamp"],
        )
        return response.get("Messages", [])

    def _handle(self, messages: list[MessageTypeDef], *, listened: bool) -> Handled:
        """Process received messages: resolve the owned ones, delete what is done, hand back the rest.

        ``listened``: the calling receiver was listening; it hands the listening over in the same step in which
        it claims the batch's futures. Once the client is closed every message goes back (its futures failed
        with the close, so none is a duplicate this process may delete).
        """
        to_delete: list[MessageTypeDef] = []
        to_return: list[MessageTypeDef] = []
        foreign: list[tuple[MessageTypeDef, str]] = []
        owned: list[tuple[MessageTypeDef, RolloutFuture, ObjectCreated]] = []
        with self._cond:
            self._listening -= listened
            self._cond.notify_all()
            if self._closed:
                to_return = messages
                messages = []
            for message in messages:
                try:
                    event = parse_object_created(message["Body"])
                    session_id = event.result_key.session_id
                except (NotAnObjectCreatedEventError, InvalidIdError) as exc:
                    logger.warning("completion poller: dropping a message that is not a result event: %s", exc)
                    to_delete.append(message)
                    continue
                future = self._pending.get(session_id)
                if future is not None and session_id not in self._claimed:
                    owned.append((message, future, event))
                    self._claimed.add(session_id)
                elif future is not None or session_id in self._finished:
                    to_delete.append(message)  # a duplicate of an event in hand, or of one already handled
                else:
                    foreign.append((message, session_id))
            self._handling += 1
        try:
            for (message, _), claim in zip(foreign, self._claims([sid for _, sid in foreign]), strict=True):
                (to_delete if claim in (Claim.MINE, Claim.ORPHAN) else to_return).append(message)
            load_failed = False
            for entry, loaded in zip(owned, self._settle_all(owned), strict=True):
                (to_delete if loaded else to_return).append(entry[0])
                load_failed = load_failed or not loaded
            self._delete(to_delete)
            self._hand_back(to_return)
        finally:
            with self._cond:
                self._claimed.difference_update(future.session_id for _, future, _ in owned)
                self._handling -= 1
                self._cond.notify_all()
        return Handled(owned=len(owned), load_failed=load_failed, handed_back=len(to_return))

    def _claims(self, session_ids: list[str]) -> list[Claim]:
        """Whose each foreign event is (read in the fetch pool); without ownership, every one is another's."""
        if self._ownership is None or not session_ids:
            return [Claim.LIVE] * len(session_ids)
        try:
            return list(self._fetchers.map(self._ownership.whose, session_ids))
        except RuntimeError:
            if not self._closed:
                raise
            return [Claim.LIVE] * len(session_ids)  # closed meanwhile: hand them back

    def _settle_all(self, owned: list[tuple[MessageTypeDef, RolloutFuture, ObjectCreated]]) -> list[bool]:
        """Settle ``owned`` in the fetch pool (``False`` for each when a close outwaited this batch)."""
        try:
            return list(self._fetchers.map(self._settle, owned))
        except RuntimeError:
            if not self._closed:
                raise
            return [False] * len(owned)  # close stopped waiting for this batch and shut the fetch pool down

    def _settle(self, item: tuple[MessageTypeDef, RolloutFuture, ObjectCreated]) -> bool:
        """Load and resolve one owned event's result; ``False`` when it could not be read (the event is retried)."""
        message, future, event = item
        sent_ms = message.get("Attributes", {}).get("SentTimestamp")
        if sent_ms is not None and future.event_sent_at is None:
            future.event_sent_at = int(sent_ms) / 1000
        try:
            result = self._load(event)
        except _AWS_ERRORS as exc:
            logger.debug("completion poller: could not read %s (%s); the event will be retried", event.key, exc)
            return False
        except InvalidResultError as exc:
            self.fail(future, RolloutError(f"result object {event.key} is not a valid rollout result: {exc}"))
            return True
        self.resolve(future, result)
        return True

    def _delete(self, messages: Iterable[MessageTypeDef]) -> None:
        entries = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)]
        if entries:
            self._batch_call(self._sqs.delete_message_batch, entries)

    def _hand_back(self, messages: Iterable[MessageTypeDef]) -> None:
        entries = [
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0} for i, m in enumerate(messages)
        ]
        if entries:
            self._batch_call(self._sqs.change_message_visibility_batch, entries)

    def _batch_call(self, call: Callable[..., Mapping[str, Any]], entries: list[dict[str, Any]]) -> None:
        for start in range(0, len(entries), 10):
            response = call(QueueUrl=self._queue_url, Entries=entries[start : start + 10])
            for failure in response.get("Failed", []):
                logger.warning(
                    "completion poller: %s failed for one message (%s); it will be received again",
                    call.__name__,
                    failure.get("Code"),
                )
