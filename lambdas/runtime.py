"""Settings and clients of one Lambda process, built once and reused.

Lambda runs a function's module code once per execution environment before its first event (the init
phase), and clients made then are ready for that event. So this module builds the runtime on import when
the function's ``ROLLOUTS_*`` settings are there (always, in Lambda and in the local worker, which exports
them before it imports the handlers); a test that imports the handlers without them builds it on the first
call instead.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import boto3
import botocore

from lambdas.observability import bind_experiment, logger
from lambdas.store import ResultStore
from rollout_budgets.acr import Acr, endpoint_acrs, reserve_soonest
from rollout_budgets.ledger import Ledger
from rollout_budgets.slot_wait import SlotWaiter
from rollout_contract.aws import ClientFactory
from rollout_contract.proof import ResultProof
from rollout_contract.resources import HANDLER_ENV_PREFIX, ExperimentResources, HandlerSettings

if TYPE_CHECKING:
    from types_boto3_bedrock_agentcore import BedrockAgentCoreClient
    from types_boto3_dynamodb import DynamoDBClient
    from types_boto3_s3 import S3Client
    from types_boto3_sqs import SQSClient

#: Longest a caller waits for an invoke slot before giving up (the dispatcher then re-queues).
MAX_TOKEN_WAIT_S = 5.0


class AwsClients(NamedTuple):
    """The boto3 clients the functions use (endpoints from ``AWS_ENDPOINT_URL_*`` when set)."""

    s3: S3Client
    sqs: SQSClient
    dynamodb: DynamoDBClient
    agentcore: BedrockAgentCoreClient
    #: Reads the experiment key that signs the functions' results (D100).
    secretsmanager: Any

    @classmethod
    def build(cls, factory: ClientFactory | None = None) -> AwsClients:
        """Build the clients (the process's region and credentials unless ``factory`` says otherwise);
        ``bedrock-agentcore`` never retries on its own (see ``rollout_budgets.acr``)."""
        factory = factory or ClientFactory()
        session = factory.session()
        return cls(
            s3=factory.client("s3", session=session),
            sqs=factory.client("sqs", session=session),
            dynamodb=factory.client("dynamodb", session=session),
            agentcore=factory.client("bedrock-agentcore", single_attempt=True, session=session),
            secretsmanager=factory.client("secretsmanager", session=session),
        )


@dataclass(frozen=True)
class Runtime:
    """Everything a handler's work needs: settings, clients and the pieces built on them."""

    settings: HandlerSettings
    resources: ExperimentResources
    clients: AwsClients
    ledger: Ledger
    store: ResultStore
    #: One per endpoint of the runtime (``settings.qualifiers``), each with its own invoke budget.
    acrs: tuple[Acr, ...]
    #: Where this process's dispatches wait for a free session slot.
    slots: SlotWaiter
    clock: Callable[[], float]
    sleep: Callable[[float], None] = time.sleep

    @classmethod
    def build(
        cls,
        settings: HandlerSettings,
        clients: AwsClients | None = None,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        max_token_wait_s: float = MAX_TOKEN_WAIT_S,
    ) -> Runtime:
        """Wire the pieces for ``settings`` (default clients unless ``clients`` is given)."""
        clients = clients or AwsClients.build()
        acrs = endpoint_acrs(
            clients.agentcore,
            clients.dynamodb,
            budget_table=settings.budget_table,
            runtime_arn=settings.runtime_arn,
            qualifiers=settings.qualifiers,
            tps_limit=settings.tps_limit,
            max_wait_s=max_token_wait_s,
            clock=clock,
            sleep=sleep,
        )
        ledger = Ledger(
            clients.dynamodb,
            sessions_table=settings.sessions_table,
            budget_table=settings.budget_table,
            exp_id=settings.exp_id,
            session_budget=settings.session_budget,
        )
        return cls(
            settings=settings,
            resources=ExperimentResources.for_experiment(settings.exp_id),
            clients=clients,
            ledger=ledger,
            store=ResultStore(
                clients.s3,
                bucket=settings.results_bucket,
                proof=functools.cache(lambda: ResultProof.from_secret(clients.secretsmanager, settings.exp_id)),
            ),
            acrs=acrs,
            slots=SlotWaiter(ledger.free_slots, clock=clock, sleep=sleep),
            clock=clock,
            sleep=sleep,
        )

    @property
    def acr(self) -> Acr:
        """The first endpoint's (the runtime's own): the only one unless the experiment has several."""
        return self.acrs[0]

    def reserve_invoke(self) -> tuple[Acr, float]:
        """An invoke slot on the endpoint that has one soonest (:func:`rollout_budgets.acr.reserve_soonest`).

        Raises:
            NoTokenError: no slot came within reach in the invoke wait.
        """
        return reserve_soonest(self.acrs, clock=self.clock, sleep=self.sleep)

    def endpoint(self, qualifier: str | None) -> Acr:
        """The endpoint ``qualifier`` (a session's recorded one); the first when ``None`` or not one of them."""
        return next((acr for acr in self.acrs if acr.qualifier == qualifier), self.acrs[0])


@functools.cache
def current_runtime() -> Runtime:
    """The process's runtime, from ``ROLLOUTS_*`` variables (built once; ``cache_clear()`` rebuilds it).

    Raises:
        pydantic.ValidationError: a required ``ROLLOUTS_*`` variable is missing or invalid.
    """
    settings = HandlerSettings.from_env()
    bind_experiment(settings.exp_id)
    # The SDK ships with the function (infra/functions.py); its version says which API operations exist.
    logger.info("cold start", extra={"boto3_version": boto3.__version__, "botocore_version": botocore.__version__})
    return Runtime.build(settings)


if f"{HANDLER_ENV_PREFIX}EXP_ID" in os.environ:
    current_runtime()
