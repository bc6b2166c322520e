"""The stand-in model and the token gateway keep an idle connection open longer than their clients' pools do.

httpx drops a pooled connection after 5 s idle; a server that closes at 5 s too (uvicorn's default) races it, and
a request sent on the connection as the server closes it fails with a ReadError (a model call through the gateway
failed that way in the latency benchmark, and its rollout ended ``agent_error``).
"""

from __future__ import annotations

import http.client
import select
import time
from urllib.parse import urlsplit

import pytest

from local_stack._process import ManagedProcess

pytestmark = pytest.mark.processes

#: Longer than httpx's pool keeps an idle connection (5 s).
IDLE_S = 6.0


@pytest.mark.parametrize(("server", "path"), [("model", "/v1/models"), ("gateway", "/health")])
def test_an_idle_connection_outlives_the_clients_pool(request: pytest.FixtureRequest, server: str, path: str) -> None:
    # GIVEN a connection that has served one request
    process: ManagedProcess = request.getfixturevalue(server)
    url = urlsplit(process.url)
    connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=10)
    try:
        connection.request("GET", path)
        assert connection.getresponse().read() and connection.sock is not None

        # WHEN it stays idle longer than an httpx pool keeps it
        time.sleep(IDLE_S)

        # THEN the server has not closed it (nothing to read, not even the end of the stream), and it serves the
        # next request
        readable, _, _ = select.select([connection.sock], [], [], 0)
        assert not readable, "the server closed the idle connection"
        connection.request("GET", path)
        assert connection.getresponse().status == 200
    finally:
        connection.close()
