"""boto3 clients for one experiment, and the experiment descriptor in SSM."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, NamedTuple

import boto3
import botocore.session
from botocore.config import Config
from botocore.exceptions import BotoCoreError, EndpointConnectionError, NoCredentialsError
from botocore.exceptions import ClientError as BotoClientError
from botocore.loaders import Loader, create_loader

from rollout_contract import ExperimentDescriptor, ExperimentResources
from trainer_client._exceptions import AwsError, ExperimentNotFoundError

__all__ = [
    "AwsClients",
    "aws_call",
    "client_config",
    "error_code",
    "load_descriptor",
    "new_session",
    "not_found_message",
]

#: One loader of botocore's service models for every session made here. A session's own loader parses the
#: models again (about 0.5 s of CPU per RolloutClient, most of it S3's); the parsed models never change.
_SHARED_LOADER: Loader | None = None
_SESSION_LOCK = threading.Lock()


def new_session(region: str | None = None) -> boto3.session.Session:
    """A new boto3 session (its own credentials and settings, as boto3 advises per thread) that shares the
    parsed service models with every other session made here."""
    global _SHARED_LOADER
    with _SESSION_LOCK:
        core = botocore.session.get_session()
        if _SHARED_LOADER is None:
            _SHARED_LOADER = create_loader(core.get_config_variable("data_path"))
        core.register_component("data_loader", _SHARED_LOADER)
        session = boto3.session.Session(botocore_session=core, region_name=region)
        # boto3 appends its data directory to the loader's search paths for every session: keep each path once.
        _SHARED_LOADER.search_paths[:] = dict.fromkeys(_SHARED_LOADER.search_paths)
        return session


class AwsClients(NamedTuple):
    """The boto3 clients the trainer uses (any object with the same methods will do in tests)."""

    sqs: Any
    s3: Any
    dynamodb: Any = None

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
        config = client_config(max_retry_attempts, max_pool_connections)
        endpoints = endpoints or {}
        session = new_session(region)
        return cls(
            sqs=session.client("sqs", endpoint_url=endpoints.get("sqs"), config=config),
            s3=session.client("s3", endpoint_url=endpoints.get("s3"), config=config),
            dynamodb=session.client("dynamodb", endpoint_url=endpoints.get("dynamodb"), config=config),
        )


def client_config(max_retry_attempts: int, max_pool_connections: int) -> Config:
    """botocore settings of the trainer's clients: standard retries, a connection pool of the given size."""
    return Config(
        retries={"max_attempts": max_retry_attempts, "mode": "standard"}, max_pool_connections=max_pool_connections
    )


def error_code(exc: BotoClientError) -> str:
    """AWS's error code of a botocore ``ClientError`` (``""`` when the response has none)."""
    return str(exc.response.get("Error", {}).get("Code", ""))


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


def load_descriptor(exp_id: str, *, region: str | None = None, ssm: Any = None) -> ExperimentDescriptor:
    """Read experiment ``exp_id``'s descriptor from SSM.

    Raises:
        ExperimentNotFoundError: the parameter does not exist.
        AwsError: SSM could not be read.
    """
    parameter = ExperimentResources.for_experiment(exp_id).descriptor_parameter
    ssm = ssm or new_session(region).client("ssm")
    try:
        with aws_call(f"reading the descriptor of experiment {exp_id!r}"):
            value = ssm.get_parameter(Name=parameter)["Parameter"]["Value"]
    except AwsError as exc:
        if exc.code == "ParameterNotFound":
            raise ExperimentNotFoundError(not_found_message(exp_id, f"no SSM parameter {parameter}")) from exc
        raise
    return ExperimentDescriptor.model_validate_json(value)
