"""Helpers for the emulator tests: test runtimes, boto3 clients, process checks (imported by the tests)."""

from __future__ import annotations

import json
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

import boto3
import httpx
from botocore.config import Config

from local_stack.acr_emulator import ColdStartDelay, RuntimeConfig

AGENTS = Path(__file__).parent / "agents"
ARN_PREFIX = "arn:aws:bedrock-agentcore:us-east-1:123456789012:runtime/"
SECRET_ENV = {"ACR_TEST_SECRET": "must-not-leak", "ACR_TEST_INHERITED": "inherited-value"}
MAX_PAYLOAD_BYTES = 64 * 1024
PRELOAD = ("preload_marker",)
#: How much nicer than the emulator the "niced" runtimes' sessions run.
NICE = 7
BROKEN_PRELOAD = "acr_test_module_that_does_not_exist"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


#: The fixed port of the agent that ignores PORT (8080 in real life; a free one here, to run beside anything).
FIXED_PORT = free_port()


def arn(name: str) -> str:
    """The ARN of a test runtime."""
    return f"{ARN_PREFIX}{name}"


def stdlib_runtime(name: str, *flags: str, **settings: object) -> RuntimeConfig:
    """A runtime running the standard-library test agent, pinging fast so lifecycle tests stay short."""
    settings = {"ping_interval_s": 0.1, **settings}
    return RuntimeConfig(arn=arn(name), command=(sys.executable, str(AGENTS / "stdlib_agent.py"), *flags), **settings)


SHARED_RUNTIMES = (
    stdlib_runtime("basic", environment={"GRANTED": "yes"}, inherit_env=("ACR_TEST_INHERITED",)),
    stdlib_runtime("idle", idle_timeout_s=0.8),
    stdlib_runtime("lifetime", max_lifetime_s=1.2),
    stdlib_runtime("stubborn", "--ignore-sigterm", stop_grace_s=0.3),
    stdlib_runtime("never-ready", "--never-ready", startup_limit_s=1.0),
    stdlib_runtime("ignores-port", "--port", str(FIXED_PORT), startup_limit_s=60.0),
    stdlib_runtime("delayed", cold_start_delay=ColdStartDelay.fixed(0.6)),
    stdlib_runtime("throttled", invoke_tps=2),
    stdlib_runtime("warm", warm_pool_size=1),
    stdlib_runtime("qualified", qualifiers=("DEFAULT", "canary")),
    stdlib_runtime("niced", nice=NICE),
    stdlib_runtime("forked-niced", preload=PRELOAD, nice=NICE),
    RuntimeConfig(arn=arn("sdk"), command=(sys.executable, str(AGENTS / "sdk_agent.py")), ping_interval_s=0.2),
    # ACR's own contract: app.run() on 8080, plain and in a container (DOCKER_CONTAINER: it binds 0.0.0.0), forked
    RuntimeConfig(
        arn=arn("port-8080"), command=(sys.executable, str(AGENTS / "acr_port_agent.py")), ping_interval_s=0.2
    ),
    RuntimeConfig(
        arn=arn("port-8080-forked"),
        command=(sys.executable, str(AGENTS / "acr_port_agent.py")),
        environment={"DOCKER_CONTAINER": "1"},
        preload=PRELOAD,
        ping_interval_s=0.2,
    ),
    stdlib_runtime("forked", preload=PRELOAD, environment={"GRANTED": "yes"}, inherit_env=("ACR_TEST_INHERITED",)),
    stdlib_runtime("forked-idle", preload=PRELOAD, idle_timeout_s=0.8),
    stdlib_runtime("forked-stubborn", "--ignore-sigterm", preload=PRELOAD, stop_grace_s=0.3),
    stdlib_runtime("forked-broken", preload=(BROKEN_PRELOAD,)),
    stdlib_runtime("forked-threaded", preload=("thread_at_import",)),
    RuntimeConfig(
        arn=arn("forked-module"),
        command=(sys.executable, "-m", "stdlib_agent", "--tag", "x"),
        working_dir=AGENTS,
        preload=PRELOAD,
        ping_interval_s=0.1,
    ),
)


def client_for(url: str | None, **config: object) -> object:
    """A boto3 ``bedrock-agentcore`` client with no retries (so every error is seen as sent)."""
    options = {"retries": {"total_max_attempts": 1}, "read_timeout": 30, **config}
    return boto3.client(
        "bedrock-agentcore",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(**options),
    )


def invoke_json(client: object, runtime_arn: str, session_id: str, payload: dict | None = None) -> dict:
    """Invoke and parse the JSON body."""
    response = client.invoke_agent_runtime(
        agentRuntimeArn=runtime_arn, runtimeSessionId=session_id, payload=json.dumps(payload or {}).encode()
    )
    return json.loads(response["response"].read())


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid still exists (and is not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def admin(url: str, view: str) -> dict:
    """GET one of the emulator's admin views."""
    return httpx.get(f"{url}/_admin/{view}", trust_env=False, timeout=10).json()


def fork_server(url: str, runtime_arn: str) -> dict:
    """The admin view of a runtime's fork server (pid, ready, children, launches)."""
    return admin(url, "stats")["fork_servers"][runtime_arn]


def wait_for(predicate: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    """Poll ``predicate`` every 50 ms until it holds or ``timeout_s`` passes; return its last value."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()
