"""The kept moto clients of the lambdas tests (tests/conftest.py ``shared_clients``): lent again, they carry nothing
a test registered on them, and two users in one test never share one."""

from __future__ import annotations

from collections import Counter
from typing import Any

from rollout_contract.aws import ClientFactory


def test_a_kept_client_is_lent_again_without_the_handlers_a_test_registered(aws: None) -> None:
    # GIVEN a kept client on which a test registered a call counter
    session = ClientFactory(region="us-east-1").session()
    client = session.client("sqs")
    calls: Counter[str] = Counter()

    def count(model: Any, **_: Any) -> None:
        calls[model.name] += 1

    client.meta.events.register("before-call", count)
    client.list_queues()
    assert calls == Counter({"ListQueues": 1})

    # WHEN the test ends (its clients are taken back) and the next one asks for the same client
    session.take_back()
    again = session.client("sqs")
    again.list_queues()

    # THEN it is the same client, and the first test's counter counts nothing more
    assert again is client
    assert calls == Counter({"ListQueues": 1})


def test_two_users_in_one_test_get_two_clients(aws: None) -> None:
    session = ClientFactory(region="us-east-1").session()
    assert session.client("sqs") is not session.client("sqs")


def test_clients_of_a_local_server_are_not_kept(aws: None) -> None:
    session = ClientFactory(region="us-east-1").session()
    first = session.client("sqs", endpoint_url="http://127.0.0.1:1")
    session.take_back()
    assert session.client("sqs", endpoint_url="http://127.0.0.1:1") is not first
