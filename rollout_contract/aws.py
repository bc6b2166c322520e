"""The one way to build boto3 clients, and to read AWS's error code (D79).

Every component builds its clients through :class:`ClientFactory`: one botocore ``Config`` (retries in botocore's
``standard`` mode, connect and read timeouts, a connection pool), the region, per-service endpoint URLs and
credentials (the local stack's), and sessions that share botocore's parsed service models. Transient errors
(throttling, 5xx, timeouts, dropped connections) are botocore's to retry; loops of our own retry only what it
does not (``rollout_contract.retry``).

boto3 is imported when a client is built, never at import: the contract stays pure.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, TypedDict, cast, overload

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    import boto3.session
    from boto3.session import Session
    from botocore.config import Config
    from botocore.loaders import Loader
    from types_boto3_bedrock_agentcore import BedrockAgentCoreClient
    from types_boto3_bedrock_agentcore_control import BedrockAgentCoreControlClient
    from types_boto3_cloudformation import CloudFormationClient
    from types_boto3_cloudwatch import CloudWatchClient
    from types_boto3_dynamodb import DynamoDBClient
    from types_boto3_ecr import ECRClient
    from types_boto3_events import EventBridgeClient
    from types_boto3_s3 import S3Client
    from types_boto3_service_quotas import ServiceQuotasClient
    from types_boto3_sqs import SQSClient
    from types_boto3_ssm import SSMClient
    from types_boto3_sts import STSClient

#: The services the project calls (their clients are typed by the types-boto3 stubs of the dev extra, D83).
Service = Literal[
    "bedrock-agentcore",
    "bedrock-agentcore-control",
    "cloudformation",
    "cloudwatch",
    "dynamodb",
    "ecr",
    "events",
    "s3",
    "secretsmanager",
    "service-quotas",
    "sqs",
    "ssm",
    "sts",
]

#: Clients by service name, as :meth:`ClientFactory.clients` returns them (each key typed as its client).
Clients = TypedDict(
    "Clients",
    {
        "bedrock-agentcore": "BedrockAgentCoreClient",
        "bedrock-agentcore-control": "BedrockAgentCoreControlClient",
        "cloudformation": "CloudFormationClient",
        "cloudwatch": "CloudWatchClient",
        "dynamodb": "DynamoDBClient",
        "ecr": "ECRClient",
        "events": "EventBridgeClient",
        "s3": "S3Client",
        "secretsmanager": "Any",
        "service-quotas": "ServiceQuotasClient",
        "sqs": "SQSClient",
        "ssm": "SSMClient",
        "sts": "STSClient",
    },
    total=False,
)

__all__ = [
    "ClientFactory",
    "Clients",
    "Service",
    "error_code",
    "error_message",
    "error_reasons",
    "http_status",
    "new_session",
    "parse_service_models",
]

#: botocore's own default for its standard retry mode: a call and two retries (``total_max_attempts``, which
#: counts the first call; botocore's ``max_attempts`` counts retries only).
STANDARD_ATTEMPTS = 3
CONNECT_TIMEOUT_S = 5.0
#: botocore's default; an SQS long poll (20 s at most) answers well within it.
READ_TIMEOUT_S = 60.0

#: Added to every request's user agent.
USER_AGENT = "agentcore-rollouts"

_SHARED_LOADER: Loader | None = None
_SESSION_LOCK = threading.Lock()


def new_session(region: str | None = None, credentials: Mapping[str, str] | None = None) -> boto3.session.Session:
    """A new boto3 session (boto3 advises one per thread) sharing the parsed service models with every other.

    A session's own loader parses the models again (about 0.5 s of CPU per session, most of it S3's); they never
    change. ``credentials``: ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY`` (the local stack's), else boto3's
    chain.
    """
    import boto3.session
    import botocore.session
    from botocore.loaders import create_loader

    global _SHARED_LOADER
    keys = credentials or {}
    with _SESSION_LOCK:
        core = botocore.session.get_session()
        if _SHARED_LOADER is None:
            _SHARED_LOADER = create_loader(core.get_config_variable("data_path"))
        core.register_component("data_loader", _SHARED_LOADER)
        session = boto3.session.Session(
            aws_access_key_id=keys.get("AWS_ACCESS_KEY_ID"),
            aws_secret_access_key=keys.get("AWS_SECRET_ACCESS_KEY"),
            botocore_session=core,
            region_name=region,
        )
        # boto3 appends its data directory to the loader's search paths for every session: keep each path once.
        _SHARED_LOADER.search_paths[:] = dict.fromkeys(_SHARED_LOADER.search_paths)
        return session


def parse_service_models(*services: Service) -> None:
    """Parse ``services``' models into the loader every session shares, now rather than at their first client.

    For a process that forks (the local stack's fork server): its children then build these clients in about
    15 ms of CPU instead of 100. Builds one throwaway client per service with placeholder credentials: no
    credential lookup, no connection, no thread.
    """
    session = new_session("us-east-1", {"AWS_ACCESS_KEY_ID": "parse-only", "AWS_SECRET_ACCESS_KEY": "parse-only"})
    for service in services:
        session.client(service)


class ClientFactory(BaseModel):
    """How to reach AWS (or the local stack): builds every boto3 client the project uses.

    Attributes:
        region: the clients' region (``None``: boto3's configuration).
        endpoints: boto3 service name -> endpoint URL (the local stack's; a service without one uses boto3's,
            ``AWS_ENDPOINT_URL_<SERVICE>`` included).
        credentials: ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY`` (``None``: boto3's credential chain).
        max_attempts: attempts of a call in botocore's standard retry mode, the first one counted.
        max_pool_connections: connections each client keeps.
        connect_timeout_s, read_timeout_s: botocore's timeouts.
    """

    model_config = ConfigDict(frozen=True)

    region: str | None = None
    endpoints: Mapping[str, str] = Field(default_factory=dict)
    credentials: Mapping[str, str] | None = None
    max_attempts: int = Field(default=STANDARD_ATTEMPTS, ge=1)
    max_pool_connections: int = Field(default=10, ge=1)
    connect_timeout_s: float = Field(default=CONNECT_TIMEOUT_S, gt=0)
    read_timeout_s: float = Field(default=READ_TIMEOUT_S, gt=0)

    def config(self, *, single_attempt: bool = False) -> Config:
        """The botocore ``Config`` of every client; ``single_attempt``: no retries at all (see :meth:`client`)."""
        from botocore.config import Config

        return Config(
            retries={"total_max_attempts": 1 if single_attempt else self.max_attempts, "mode": "standard"},
            connect_timeout=self.connect_timeout_s,
            read_timeout=self.read_timeout_s,
            max_pool_connections=self.max_pool_connections,
            user_agent_extra=USER_AGENT,
        )

    def session(self) -> boto3.session.Session:
        """A new session in this factory's region, with its credentials."""
        return new_session(self.region, self.credentials)

    @overload
    def client(
        self, service: Literal["bedrock-agentcore"], *, single_attempt: bool = ..., session: Session | None = ...
    ) -> BedrockAgentCoreClient: ...
    @overload
    def client(
        self,
        service: Literal["bedrock-agentcore-control"],
        *,
        single_attempt: bool = ...,
        session: Session | None = ...,
    ) -> BedrockAgentCoreControlClient: ...
    @overload
    def client(
        self, service: Literal["cloudformation"], *, single_attempt: bool = ..., session: Session | None = ...
    ) -> CloudFormationClient: ...
    @overload
    def client(
        self, service: Literal["cloudwatch"], *, single_attempt: bool = ..., session: Session | None = ...
    ) -> CloudWatchClient: ...
    @overload
    def client(
        self, service: Literal["dynamodb"], *, single_attempt: bool = ..., session: Session | None = ...
    ) -> DynamoDBClient: ...
    @overload
    def client(
        self, service: Literal["ecr"], *, single_attempt: bool = ..., session: Session | None = ...
    ) -> ECRClient: ...
    @overload
    def client(
        self, service: Literal["events"], *, single_attempt: bool = ..., session: Session | None = ...
    ) -> EventBridgeClient: ...
    @overload
    def client(
        self, service: Literal["s3"], *, single_attempt: bool = ..., session: Session | None = ...
    ) -> S3Client: ...
    @overload
    def client(  # no stubs of this service are installed (D100: the experiment's secrets)
        self, service: Literal["secretsmanager"], *, single_attempt: bool = ..., session: Session | None = ...
    ) -> Any: ...
    @overload
    def client(
        self, service: Literal["service-quotas"], *, single_attempt: bool = ..., session: Session | None = ...
    ) -> ServiceQuotasClient: ...
    @overload
    def client(
        self, service: Literal["sqs"], *, single_attempt: bool = ..., session: Session | None = ...
    ) -> SQSClient: ...
    @overload
    def client(
        self, service: Literal["ssm"], *, single_attempt: bool = ..., session: Session | None = ...
    ) -> SSMClient: ...
    @overload
    def client(
        self, service: Literal["sts"], *, single_attempt: bool = ..., session: Session | None = ...
    ) -> STSClient: ...
    def client(self, service: Service, *, single_attempt: bool = False, session: Session | None = None) -> Any:
        """A boto3 client of ``service`` (a new session unless ``session`` is given).

        ``single_attempt``: botocore never retries; for ``bedrock-agentcore`` invokes, where each attempt must take
        its own token of the invoke budget (a hidden retry would be an invoke outside it).
        """
        return (session or self.session()).client(
            service,
            endpoint_url=self.endpoints.get(service),
            config=self.config(single_attempt=single_attempt),
        )

    def clients(self, *services: Service) -> Clients:
        """One client of each of ``services``, from one session."""
        session = self.session()
        # A TypedDict cannot be built key by key from a loop; each value is the client its key's overload names.
        return cast("Clients", {service: self.client(service, session=session) for service in services})


def error_code(exc: Exception) -> str:
    """AWS's error code of a botocore ``ClientError`` (``""`` when the response has none, or for another error)."""
    return str(_response(exc).get("Error", {}).get("Code", ""))


def error_message(exc: Exception) -> str:
    """AWS's error message of a botocore ``ClientError`` (``""`` when the response has none)."""
    return str(_response(exc).get("Error", {}).get("Message", ""))


def http_status(exc: Exception) -> int:
    """The HTTP status of a botocore ``ClientError``'s response (``0`` when there is none)."""
    return int(_response(exc).get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


def error_reasons(exc: Exception) -> list[str]:
    """The codes of a cancelled DynamoDB transaction's ``CancellationReasons``, one per item (``"None"``: no
    problem with that item); empty for any other error."""
    return [str(reason.get("Code", "None")) for reason in _response(exc).get("CancellationReasons", [])]


def _response(exc: Exception) -> Mapping[str, Any]:
    response = getattr(exc, "response", None)
    return response if isinstance(response, Mapping) else {}
