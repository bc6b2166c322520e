"""The one client factory: every client gets botocore's standard retries, the timeouts, endpoints and credentials."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError
from botocore.loaders import JSONFileLoader
from pydantic import ValidationError

from rollout_contract import aws
from rollout_contract.aws import USER_AGENT, ClientFactory, error_code, error_message, http_status, parse_service_models


def test_a_client_has_standard_retries_the_timeouts_and_the_pool() -> None:
    # GIVEN a factory with a retry budget, a pool size and a read timeout
    factory = ClientFactory(region="us-west-2", max_attempts=5, max_pool_connections=7, read_timeout_s=30)
    # WHEN it builds a client
    config = factory.client("sqs").meta.config
    # THEN botocore retries in standard mode with that budget, and the timeouts and pool are the factory's
    assert config.retries == {"total_max_attempts": 5, "mode": "standard"}
    assert (config.connect_timeout, config.read_timeout, config.max_pool_connections) == (5.0, 30, 7)
    assert config.region_name == "us-west-2"
    assert config.user_agent_extra == USER_AGENT


def test_a_single_attempt_client_never_retries() -> None:
    # GIVEN / WHEN the client of an invoke that spends a budget token per attempt
    config = ClientFactory(region="us-east-1").client("bedrock-agentcore", single_attempt=True).meta.config
    # THEN botocore makes one attempt only
    assert config.retries == {"total_max_attempts": 1, "mode": "standard"}


def test_endpoints_and_credentials_reach_the_clients() -> None:
    # GIVEN the local stack's endpoints and credentials
    keys = {"AWS_ACCESS_KEY_ID": "local-key", "AWS_SECRET_ACCESS_KEY": "local-secret"}
    factory = ClientFactory(region="us-east-1", endpoints={"s3": "http://127.0.0.1:5999"}, credentials=keys)
    # WHEN it builds clients from one session
    clients = factory.clients("s3", "sqs")
    # THEN the service with an endpoint goes there, the other to AWS, both signed with the given keys
    assert clients["s3"].meta.endpoint_url == "http://127.0.0.1:5999"
    assert clients["sqs"].meta.endpoint_url.startswith("https://")
    assert clients["sqs"]._request_signer._credentials.access_key == "local-key"


@pytest.mark.parametrize("parsed_first", [False, True])
def test_parsed_service_models_spare_later_clients_the_parse(
    monkeypatch: pytest.MonkeyPatch, parsed_first: bool
) -> None:
    monkeypatch.setattr(aws, "_SHARED_LOADER", None)  # a process that has built no client yet
    if parsed_first:
        parse_service_models("s3")
    files_read: list[str] = []
    load_file = JSONFileLoader.load_file

    def counting(self: JSONFileLoader, file_path: str) -> Any:
        files_read.append(file_path)
        return load_file(self, file_path)

    monkeypatch.setattr(JSONFileLoader, "load_file", counting)
    factory = ClientFactory(region="eu-west-1", credentials={"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"})
    factory.client("s3")
    assert (files_read == []) is parsed_first, files_read


def test_a_factory_refuses_settings_out_of_range() -> None:
    # GIVEN / WHEN / THEN no attempts at all is refused, naming the field
    with pytest.raises(ValidationError, match="max_attempts"):
        ClientFactory(max_attempts=0)


def test_error_code_message_and_status_of_a_client_error_and_of_other_errors() -> None:
    # GIVEN a ClientError as botocore raises it, and an error that has no response
    error = {"Error": {"Code": "SlowDown", "Message": "Reduce your request rate"}}
    exc = ClientError({**error, "ResponseMetadata": {"HTTPStatusCode": 503}}, "PutObject")
    other = EndpointConnectionError(endpoint_url="http://127.0.0.1:1")
    # WHEN / THEN the code, message and status are read from the response; the other error has none
    assert (error_code(exc), error_message(exc), http_status(exc)) == ("SlowDown", "Reduce your request rate", 503)
    assert (error_code(other), error_message(other), http_status(other)) == ("", "", 0)
