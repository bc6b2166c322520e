"""The trainer-side SDK: submit rollouts, receive their results as events, train.

- :class:`RolloutClient`: ``invoke`` / ``invoke_async`` -> :class:`RolloutFuture` (``cancelled`` a
  :class:`CancelledFlag`), ``run_batch`` / ``run_batch_async`` -> :class:`BatchResult` / :class:`AsyncBatchResult`
  of :class:`BatchItem`, ``run_groups`` / ``run_groups_async`` -> :class:`RolloutGroup`, ``attach`` /
  ``attach_journal`` to collect an earlier process's rollouts, ``for_experiment(name)``; ``in_flight()`` ->
  :class:`InFlightView` (every trainer's rollouts in flight, checked against the stored results).
- :class:`ClientResult`: the stored result document (a ``dict``, as ART's) with typed views, token traces
  (:class:`TokenTrace`) and ``raise_for_status()``.
- Errors: :class:`RolloutError` and its families (see ``trainer_client._exceptions``); botocore errors
  arrive wrapped (:class:`AwsError`, :class:`SubmitError`).
- Settings: :class:`PollSettings`, :class:`TraceSettings`; :class:`RolloutOptions` names the keywords
  that set ``_rollout`` fields (unknown keywords are a ``TypeError``; other fields go in ``rollout_config``).
- :func:`read_dataset`: a JSONL dataset of payloads, read strictly. The ``rollouts`` CLI: ``trainer_client._cli:main``.

Differences from agentcore-rl-toolkit (ART), same names otherwise:

- Completion comes from one SQS long poll per client (S3 -> EventBridge -> SQS), not S3 HEAD polling
  per future; ``result(timeout)`` never overshoots.
- ``result()`` returns the stored document for every terminal status, with a typed ``status``;
  ``BatchItem.success`` means status ``succeeded`` (ART: any dict came back, agent failures included).
- ``timeout`` is each rollout's server-side deadline (the sweeper writes ``timed_out``), so every
  future resolves even if the agent dies; ``tps_limit`` is ignored (the dispatcher owns the rate).
- ``input_id`` defaults to the session id and ``run_batch`` takes ``input_ids``; ``run_groups`` gives
  GRPO groups with advantages (ART gave every payload a fresh random ``input_id``).
- ``cancel()`` asks the dispatcher to cancel (ART stopped the session from the trainer); the future
  raises ``concurrent.futures.CancelledError`` as in ART, and ``result(timeout)`` cancels when it times out.
"""

from trainer_client._aws import AwsClients
from trainer_client._batch import AsyncBatchResult, BatchItem, BatchResult
from trainer_client._client import RolloutClient
from trainer_client._config import (
    DEFAULT_ROLLOUT_TIMEOUT_S,
    PollSettings,
    RolloutDefaults,
    RolloutOptions,
    TraceSettings,
)
from trainer_client._dataset import read_dataset
from trainer_client._exceptions import (
    AgentError,
    AwsError,
    ClientClosedError,
    DispatchError,
    DispatchFailedError,
    DuplicateSessionError,
    ExperimentNotFoundError,
    MissingRolloutFieldError,
    RolloutCancelledError,
    RolloutClientError,
    RolloutError,
    RolloutTimeoutError,
    StoreUnavailableError,
    SubmitError,
)
from trainer_client._future import CancelledFlag, RolloutFuture
from trainer_client._grpo import FailurePolicy, GroupCollector, RolloutGroup, group_advantages
from trainer_client._journal import read_journal
from trainer_client._results import ClientResult, TokenTrace
from trainer_client._sessions import InFlightView
from trainer_client._status import ExperimentStatus, QueueDepth

__all__ = [
    "AgentError",
    "AsyncBatchResult",
    "AwsClients",
    "AwsError",
    "BatchItem",
    "BatchResult",
    "CancelledFlag",
    "ClientClosedError",
    "ClientResult",
    "DEFAULT_ROLLOUT_TIMEOUT_S",
    "DispatchError",
    "DispatchFailedError",
    "DuplicateSessionError",
    "ExperimentNotFoundError",
    "ExperimentStatus",
    "FailurePolicy",
    "GroupCollector",
    "InFlightView",
    "MissingRolloutFieldError",
    "PollSettings",
    "QueueDepth",
    "RolloutCancelledError",
    "RolloutClient",
    "RolloutClientError",
    "RolloutDefaults",
    "RolloutError",
    "RolloutFuture",
    "RolloutGroup",
    "RolloutOptions",
    "RolloutTimeoutError",
    "StoreUnavailableError",
    "SubmitError",
    "TokenTrace",
    "TraceSettings",
    "group_advantages",
    "read_dataset",
    "read_journal",
]
