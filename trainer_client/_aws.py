"""boto3 clients for one experiment, and the experiment descriptor in SSM."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple

from botocore.exceptions import BotoCoreError, EndpointConnectionError, NoCredentialsError
from botocore.exceptions import ClientError as BotoClientError

from rollout_contract import ExperimentDescriptor, ExperimentResources
from rollout_contract.aws import ClientFactory, error_code
from trainer_client._exceptions import AwsError, ExperimentNotFoundError

if TYPE_CHECKING:
    from types_boto3_dynamodb import DynamoDBClient
    from types_boto3_s3 import S3Client
    from types_boto3_sqs import SQSClient
    from types_boto3_ssm import SSMClient

__all__ = ["AwsClients", "aws_call", "load_descriptor", "not_found_message"]


class AwsClients(NamedTuple):
    """The boto3 clients the trainer uses (any object with the same methods will do in tests)."""

    sqs: SQSClient
    s3: S3Client
    dynamodb: DynamoDBClient | None = None
    #: Reads the experiment key that proves results (D100); ``None``: built from the client's factory.
    secretsmanager: Any = None

    def require_dynamodb(self) -> DynamoDBClient:
        """The DynamoDB client (the sessions table's reads need it).

        Raises:
            ValueError: these clients were built without one (``AwsClients.create`` builds it).
        """
        if self.dynamodb is None:
            raise ValueError("these AwsClients have no DynamoDB client; build them with AwsClients.create()")
        return self.dynamodb

    @classmethod
    def create(
        cls,
        *,
        region: str | None = None,
        endpoints: Mapping[str, str] | None = None,
        max_retry_attempts: int = 5,
        max_pool_connections: int = 10,
    ) -> AwsClients:
        """Build clients; ``endpoints`` maps boto3 service names to URLs (the local stack's)."""
        return cls.build(
            ClientFactory(
                region=region,
                endpoints=endpoints or {},
                max_attempts=max_retry_attempts + 1,
                max_pool_connections=max_pool_connections,
            )
        )

    @classmethod
    def build(cls, factory: ClientFactory) -> AwsClients:
        """Build the clients ``factory`` describes."""
        session = factory.session()
        return cls(
            sqs=factory.client("sqs", session=session),
            s3=factory.client("s3", session=session),
            dynamodb=factory.client("dynamodb", session=session),
            secretsmanager=factory.client("secretsmanager", session=session),
        )


@contextmanager
def aws_call(what: str) -> Iterator[None]:
    """Turn botocore errors raised inside the block into :class:`AwsError` saying ``what`` failed.

    Public methods wrap their AWS calls in this, so callers catch one error tree (``RolloutError``).
    """
    try:
        yield
    except BotoClientError as exc:
        raise AwsError(f"{what} failed: {exc}", code=error_code(exc)) from exc
    except EndpointConnectionError as exc:
        raise AwsError(
            f"{what} failed: nothing answers at {exc.kwargs.get('endpoint_url')}; if that is the local stack, it is "
            "not running: start it with `rollouts local up` (`rollouts local status` shows it)"
        ) from exc
    except NoCredentialsError as exc:
        raise AwsError(
            f"{what} failed: no AWS credentials; configure a profile or AWS_* variables, or for the local stack "
            'run `eval "$(rollouts local status --env)"` in this shell'
        ) from exc
    except BotoCoreError as exc:
        raise AwsError(f"{what} failed: {exc}") from exc


def not_found_message(exp_id: str, what: str) -> str:
    """Say that experiment ``exp_id`` is missing and how to create it."""
    return (
        f"experiment {exp_id!r} not found ({what}). Create it with "
        f"`npx cdk deploy -c experiment={exp_id} -c image_tag=TAG` in AWS (README, 'Deploying to AWS'), "
        "or start the local stack with `rollouts local up`, then retry"
    )


def load_descriptor(exp_id: str, *, region: str | None = None, ssm: SSMClient | None = None) -> ExperimentDescriptor:
    """Read experiment ``exp_id``'s descriptor from SSM.

    Raises:
        ExperimentNotFoundError: the parameter does not exist.
        AwsError: SSM could not be read.
    """
    parameter = ExperimentResources.for_experiment(exp_id).descriptor_parameter
    ssm = ssm or ClientFactory(region=region).client("ssm")
    try:
        with aws_call(f"reading the descriptor of experiment {exp_id!r}"):
            value = ssm.get_parameter(Name=parameter)["Parameter"]["Value"]
    except AwsError as exc:
        if exc.code == "ParameterNotFound":
            raise ExperimentNotFoundError(not_found_message(exp_id, f"no SSM parameter {parameter}")) from exc
        raise
    return ExperimentDescriptor.model_validate_json(value)
