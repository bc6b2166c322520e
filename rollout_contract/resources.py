"""Resource definitions shared by the CDK app and the local stack.

Names, queue and table shapes, the result rule's event pattern, the Lambda settings and the experiment
descriptor are defined once here; ``infra/`` turns them into CloudFormation and the local stack into
boto3 calls against moto, so the two cannot drift.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from enum import StrEnum
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from rollout_contract.events import OBJECT_CREATED, S3_SOURCE
from rollout_contract.ids import InvalidIdError, validate_experiment
from rollout_contract.keys import experiment_prefix
from rollout_contract.naming import DLQ_SUFFIX, EXPERIMENT_NAMES, PROJECT
from rollout_contract.proof import UnprovenResults
from rollout_contract.protocol import (
    DEFAULT_ACTIVE_SESSION_QUOTA,
    DEFAULT_INVOKE_TPS,
    DEFAULT_QUALIFIER,
    MAX_RUNTIME_ENDPOINTS,
    endpoint_qualifiers,
    runtime_id,
)

DESCRIPTOR_PARAMETER_PREFIX = EXPERIMENT_NAMES["descriptor_parameter"].render("")
SHARED_STACK_NAME = "AgentcoreRollouts-Shared"
LOCAL_RESULTS_BUCKET = f"{PROJECT}-results-local"
HANDLER_ENV_PREFIX = "ROLLOUTS_"
#: ECR repository (shared stack) that holds the agent images of every experiment.
AGENT_REPOSITORY_NAME = f"{PROJECT}-agents"
_DAY_S = 24 * 3600
#: SQS's maximum: a dead letter waits two weeks for someone to look at it. SQS counts a message's age from
#: its first enqueue, so every source queue keeps messages for at most half of this (see QueueSpec).
DLQ_RETENTION_S = 14 * _DAY_S
#: The session budget an experiment's functions keep unless deployed with another: 90 % of ACR's session quota.
DEFAULT_SESSION_BUDGET = int(DEFAULT_ACTIVE_SESSION_QUOTA * 0.9)
#: The experiment's Lambda functions, as the descriptor's ``function_names`` keys them.
FUNCTION_ROLES = ("dispatcher", "finisher", "sweeper")
#: The experiment's queues by label (``ExperimentResources.<label>_queue``): the dead-letter alarms, the dashboard
#: and ``rollouts doctor`` name each queue and its dead-letter queue by it.
QUEUE_LABELS = ("dispatch", "completion", "finisher")


def results_bucket_name(account: str, region: str) -> str:
    """Name of the shared results bucket in ``account`` and ``region`` (bucket names are global)."""
    return f"{PROJECT}-results-{account}-{region}"


class QueueSpec(NamedTuple):
    """An SQS queue with its dead-letter queue (which keeps messages :data:`DLQ_RETENTION_S`).

    A queue a Lambda consumes has a visibility timeout of at least six times the function's timeout (AWS's
    advice for SQS event sources; the CDK tests check it), and every queue keeps messages at most half as
    long as its dead-letter queue, so a message moved there late still waits days for someone to look.
    """

    name: str
    visibility_timeout_s: int
    retention_s: int
    max_receive_count: int

    @property
    def dlq_name(self) -> str:
        """Name of the dead-letter queue that catches messages received ``max_receive_count`` times."""
        return f"{self.name}{DLQ_SUFFIX}"

    def dlq_url(self, queue_url: str) -> str:
        """URL of the dead-letter queue, given this queue's URL (same account, region and endpoint)."""
        base, _, name = queue_url.rpartition("/")
        if name != self.name:
            raise ValueError(f"{queue_url!r} is not the URL of queue {self.name!r}")
        return f"{base}/{self.dlq_name}"

    def sibling_url(self, other_url: str) -> str:
        """URL of this queue, given the URL of another queue of the same account, region and endpoint."""
        return f"{other_url.rpartition('/')[0]}/{self.name}"


class IndexSpec(NamedTuple):
    """A DynamoDB global secondary index (keys are S partition, N sort; projection ALL)."""

    name: str
    partition_key: str
    sort_key: str


class TableSpec(NamedTuple):
    """A DynamoDB table (on-demand, string partition key, TTL attribute)."""

    name: str
    partition_key: str
    ttl_attribute: str
    indexes: tuple[IndexSpec, ...] = ()

    def create_table_request(self) -> dict[str, Any]:
        """The ``CreateTable`` request of this table: on demand, indexes with a string partition and a number
        sort key, every attribute projected (TTL is a separate call)."""
        attributes = {self.partition_key: "S"}
        for index in self.indexes:
            attributes.setdefault(index.partition_key, "S")
            attributes.setdefault(index.sort_key, "N")
        request: dict[str, Any] = {
            "TableName": self.name,
            "BillingMode": "PAY_PER_REQUEST",
            "KeySchema": [{"AttributeName": self.partition_key, "KeyType": "HASH"}],
            "AttributeDefinitions": [
                {"AttributeName": name, "AttributeType": kind} for name, kind in attributes.items()
            ],
        }
        if self.indexes:
            request["GlobalSecondaryIndexes"] = [
                {
                    "IndexName": index.name,
                    "KeySchema": [
                        {"AttributeName": index.partition_key, "KeyType": "HASH"},
                        {"AttributeName": index.sort_key, "KeyType": "RANGE"},
                    ],
                    "Projection": {"ProjectionType": "ALL"},
                }
                for index in self.indexes
            ]
        return request


# Sessions table: one item per rollout. The sparse index holds rollouts in flight only (the
# attribute is removed when a rollout finishes), sorted by deadline, for the sweeper.
SESSIONS_PARTITION_KEY = "session_id"
INFLIGHT_INDEX = IndexSpec(name="inflight-by-deadline", partition_key="inflight", sort_key="deadline_at")
# Budget table (account-wide, in the shared stack): TPS buckets per runtime and the session budget.
BUDGET_PARTITION_KEY = "budget_id"
TTL_ATTRIBUTE = "expires_at"

BUDGET_TABLE = TableSpec(name=f"{PROJECT}-budgets", partition_key=BUDGET_PARTITION_KEY, ttl_attribute=TTL_ATTRIBUTE)


class ExperimentResources(NamedTuple):
    """The names and shapes of one experiment's resources (``exp_id`` is the experiment: an exp_id without a run)."""

    exp_id: str
    dispatch_queue: QueueSpec
    completion_queue: QueueSpec
    finisher_queue: QueueSpec
    sessions_table: TableSpec
    result_rule_name: str
    descriptor_parameter: str
    stack_name: str
    runtime_name: str

    @classmethod
    def for_experiment(cls, exp_id: str) -> ExperimentResources:
        """Derive every resource name of experiment ``exp_id`` (from ``rollout_contract.naming``).

        Raises:
            InvalidIdError: ``exp_id`` is not an experiment name (an exp_id with a run is refused, naming both).
        """
        exp_id = validate_experiment(exp_id)

        def name(kind: str) -> str:
            return EXPERIMENT_NAMES[kind].render(exp_id)

        return cls(
            exp_id=exp_id,
            # The dispatcher re-queues throttled messages itself and ends a rollout as dispatch_failed
            # after HandlerSettings.max_dispatch_attempts; the DLQ only catches what it cannot parse.
            # Visibility: 6x the dispatcher's 60 s timeout; it is also the lease of a dispatcher that died.
            dispatch_queue=QueueSpec(
                name("dispatch_queue"), visibility_timeout_s=360, retention_s=4 * _DAY_S, max_receive_count=1000
            ),
            # Trainer processes sharing an experiment hand back each other's messages (visibility 0),
            # which counts as a receive: the redrive threshold is SQS's maximum.
            # Retention: an hour. A running trainer reads its events within seconds; one that restarts reads the
            # stored results when it attaches, not the events; one stopped longer resolves its futures from S3 at
            # their deadlines. So an event no trainer of ours reads (an experiment used only by ART's own client,
            # which HEAD-polls S3) expires within the hour instead of sitting 7 days (D93).
            completion_queue=QueueSpec(
                name("completion_queue"), visibility_timeout_s=60, retention_s=3600, max_receive_count=1000
            ),
            # Visibility: 6x the finisher's 60 s timeout.
            finisher_queue=QueueSpec(
                name("finisher_queue"), visibility_timeout_s=360, retention_s=4 * _DAY_S, max_receive_count=10
            ),
            sessions_table=TableSpec(
                name=name("sessions_table"),
                partition_key=SESSIONS_PARTITION_KEY,
                ttl_attribute=TTL_ATTRIBUTE,
                indexes=(INFLIGHT_INDEX,),
            ),
            result_rule_name=name("result_rule"),
            descriptor_parameter=name("descriptor_parameter"),
            stack_name=name("stack"),
            # ACR names: a letter, then letters, digits or underscores (the id's '-' become '_').
            runtime_name=name("runtime"),
        )

    @property
    def queues(self) -> dict[str, QueueSpec]:
        """The experiment's queues by their label (:data:`QUEUE_LABELS`); each redrives to a dead-letter queue."""
        return {label: getattr(self, f"{label}_queue") for label in QUEUE_LABELS}

    def dashboard_name(self, region: str) -> str:
        """Name of the experiment's CloudWatch dashboard in ``region`` (dashboards are account-wide)."""
        return EXPERIMENT_NAMES["dashboard"].render(self.exp_id, region=region)


def experiment_of_runtime(runtime_arn: str) -> str | None:
    """The experiment whose stack created runtime ``runtime_arn``, from the runtime's name; ``None`` for another name.

    ACR makes a runtime's id from its name, ``-`` and ten characters; the stack names it ``rollout_<experiment>``
    with the experiment's ``-`` as ``_`` (experiment names hold no ``_``, so that is undone exactly).
    """
    name = runtime_id(runtime_arn).rpartition("-")[0]
    prefix = EXPERIMENT_NAMES["runtime"].render("")
    if not name.startswith(prefix):
        return None
    try:
        return validate_experiment(name[len(prefix) :].replace("_", "-"))
    except InvalidIdError:
        return None


def result_event_pattern(bucket: str, exp_id: str) -> dict[str, Any]:
    """EventBridge pattern matching result objects of experiment ``exp_id`` in ``bucket`` (every run's)."""
    return {
        "source": [S3_SOURCE],
        "detail-type": [OBJECT_CREATED],
        "detail": {
            "bucket": {"name": [bucket]},
            "object": {"key": [{"prefix": experiment_prefix(exp_id)}]},
        },
    }


class HandlerSettings(BaseModel):
    """What the dispatcher, finisher and sweeper need, passed as ``ROLLOUTS_*`` environment variables."""

    model_config = ConfigDict(frozen=True)

    exp_id: str
    results_bucket: str
    sessions_table: str
    budget_table: str
    runtime_arn: str
    runtime_qualifier: str = DEFAULT_QUALIFIER
    #: Endpoints of the runtime the experiment invokes (each with its own ``tps_limit``): see :attr:`qualifiers`.
    runtime_endpoints: int = Field(default=1, ge=1, le=MAX_RUNTIME_ENDPOINTS)
    dispatch_queue_url: str
    tps_limit: float = Field(default=DEFAULT_INVOKE_TPS, gt=0)
    session_budget: int = Field(default=DEFAULT_SESSION_BUDGET, gt=0)
    max_dispatch_attempts: int = Field(default=30, gt=0)

    @property
    def qualifiers(self) -> tuple[str, ...]:
        """The endpoints' qualifiers, ``runtime_qualifier`` first."""
        return endpoint_qualifiers(self.runtime_qualifier, self.runtime_endpoints)

    def to_env(self) -> dict[str, str]:
        """Render as environment variables (values stay strings, so CDK tokens pass through)."""
        return {f"{HANDLER_ENV_PREFIX}{name.upper()}": str(value) for name, value in self.model_dump().items()}

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> HandlerSettings:
        """Read the settings from ``ROLLOUTS_*`` variables (raises ``ValidationError`` naming what is missing)."""
        environ = os.environ if environ is None else environ
        names = {name: f"{HANDLER_ENV_PREFIX}{name.upper()}" for name in cls.model_fields}
        return cls.model_validate({name: environ[var] for name, var in names.items() if var in environ})


class ExperimentKind(StrEnum):
    """What an experiment's runtime hosts."""

    #: An RL agent: the trainer submits rollouts, the dispatcher invokes them (``trainer_client.RolloutClient``).
    AGENT = "agent"
    #: ART's sandbox daemon (``agent_app.sandbox``): the trainer starts sandboxes and runs commands in them
    #: (``trainer_client.sandbox.SandboxClient``), under the same session and invoke budgets.
    SANDBOX = "sandbox"


class ExperimentDescriptor(BaseModel):
    """Everything a trainer needs to use an experiment, published as one SSM parameter.

    ``endpoints`` maps boto3 service names to endpoint URLs for the local stack; it is empty in AWS.
    ``function_names`` maps each of :data:`FUNCTION_ROLES` to its Lambda function name (the ``FunctionName``
    dimension of its ``AWS/Lambda`` metrics), ``log_groups`` to the CloudWatch log group it writes to (named by
    CloudFormation); both empty in descriptors published before they existed, and ``log_groups`` locally.
    ``model_id`` is the model name agents are told when a trainer names none (``-c model_id`` in AWS; the
    local stack's own model); ``required_rollout_fields`` are the ``_rollout`` fields the experiment's agent
    needs, so a submit without them is refused before anything is sent. ``unproven_results`` is what every reader
    of the experiment (trainers, the CLI's views) does with a result that carries no proof of its agent (D100):
    ``accept`` for an experiment whose agent is ART's own (``-c unproven_results=accept``).
    ``kind`` says what the runtime hosts; ``tps_limit`` and ``session_budget`` are the budgets the functions keep,
    which a sandbox client spends from too (so it must space its calls and count its slots alike); ``tps_limit`` is
    per endpoint, and the functions invoke ``runtime_endpoints`` of them (``-c endpoints=K``).
    """

    model_config = ConfigDict(frozen=True)

    exp_id: str
    region: str
    results_bucket: str
    dispatch_queue_url: str
    completion_queue_url: str
    sessions_table: str
    budget_table: str
    runtime_arn: str
    runtime_qualifier: str = DEFAULT_QUALIFIER
    runtime_endpoints: int = Field(default=1, ge=1, le=MAX_RUNTIME_ENDPOINTS)
    gateway_url: str | None = None
    endpoints: dict[str, str] = Field(default_factory=dict)
    function_names: dict[str, str] = Field(default_factory=dict)
    log_groups: dict[str, str] = Field(default_factory=dict)
    model_id: str | None = None
    required_rollout_fields: list[str] = Field(default_factory=list)
    unproven_results: UnprovenResults = UnprovenResults.REJECT
    kind: ExperimentKind = ExperimentKind.AGENT
    tps_limit: float = Field(default=DEFAULT_INVOKE_TPS, gt=0)
    session_budget: int = Field(default=DEFAULT_SESSION_BUDGET, gt=0)

    @property
    def resources(self) -> ExperimentResources:
        """The experiment's resource names."""
        return ExperimentResources.for_experiment(self.exp_id)
