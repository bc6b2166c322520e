"""boto3 clients for one experiment, and the experiment descriptor in SSM."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError as BotoClientError

from rollout_contract import ExperimentDescriptor, ExperimentResources
from trainer_client._exceptions import ExperimentNotFoundError

__all__ = ["AwsClients", "load_descriptor", "not_found_message"]


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
        config = Config(
            retries={"max_attempts": max_retry_attempts, "mode": "standard"},
            max_pool_connections=max_pool_connections,
        )
        endpoints = endpoints or {}
        session = boto3.session.Session(region_name=region)
        return cls(
            sqs=session.client("sqs", endpoint_url=endpoints.get("sqs"), config=config),
            s3=session.client("s3", endpoint_url=endpoints.get("s3"), config=config),
            dynamodb=session.client("dynamodb", endpoint_url=endpoints.get("dynamodb"), config=config),
        )


def not_found_message(exp_id: str, what: str) -> str:
    """Say that experiment ``exp_id`` is missing and how to create it."""
    return (
        f"experiment {exp_id!r} not found ({what}). Create it with `cdk deploy -c experiment={exp_id}` in AWS, "
        "or start the local stack with `rollouts local up`, then retry"
    )


def load_descriptor(exp_id: str, *, region: str | None = None, ssm: Any = None) -> ExperimentDescriptor:
    """Read experiment ``exp_id``'s descriptor from SSM.

    Raises:
        ExperimentNotFoundError: the parameter does not exist.
    """
    parameter = ExperimentResources.for_experiment(exp_id).descriptor_parameter
    ssm = ssm or boto3.session.Session(region_name=region).client("ssm")
    try:
        value = ssm.get_parameter(Name=parameter)["Parameter"]["Value"]
    except BotoClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ParameterNotFound":
            raise ExperimentNotFoundError(not_found_message(exp_id, f"no SSM parameter {parameter}")) from exc
        raise
    return ExperimentDescriptor.model_validate_json(value)
