"""Fixtures shared by every test directory."""

from __future__ import annotations

import copy
import functools
import gc
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from hypothesis import settings

from local_stack.moto_server import patch_moto
from rollout_contract.aws import ClientFactory, new_session

#: `make check`, the fast loop, runs the property tests with fewer examples, and the state machines with fewer
#: steps (``--hypothesis-profile=check``); `make test` runs each with its own counts.
settings.register_profile("check", max_examples=3, stateful_step_count=10)

# Every test's moto (the in-process mock and the trainer tests' server alike) answers as the local stack's server
# does: S3's 403 for a missing key, DynamoDB's atomic transactions, SQS's prompt long polls, no per-request log line.
patch_moto()


#: The marks a test module gives all of its tests in its first lines (``pytestmark = pytest.mark.e2e``, or a list).
_MODULE_MARKS = re.compile(r"^pytestmark = (.*)$", re.MULTILINE)
_MARK_NAME = re.compile(r"\bpytest\.mark\.(\w+)\b")
#: A ``-m`` expression that only leaves marks out: ``not e2e and not cdk ...`` (make check's).
_ONLY_EXCLUSIONS = re.compile(r"\s*not\s+\w+(\s+and\s+not\s+\w+)*\s*")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Leave unimported the modules whose every test the run's ``-m "not a and not b ..."`` leaves out (make check).

    Such a run deselects their tests after collecting them anyway; importing them costs each pytest-xdist worker
    what they import: aws_cdk starts jsii's Node process and loads the CDK's assemblies (2-3 s of CPU), the
    processes and e2e modules import the OpenAI SDK and the local stack.
    """
    markexpr = config.option.markexpr or ""
    if collection_path.suffix != ".py" or not _ONLY_EXCLUSIONS.fullmatch(markexpr):
        return None
    left_out = set(re.findall(r"not\s+(\w+)", markexpr))
    declared = _MODULE_MARKS.search(collection_path.read_text())
    return bool(declared and left_out & set(_MARK_NAME.findall(declared.group(1)))) or None


def pytest_collection_finish(session: pytest.Session) -> None:
    """Spare the test process Python's full garbage collections, which cost a quarter of its CPU (D86).

    The process holds a large heap that lives for the whole session (the imported packages, botocore's parsed
    service models, moto's backends). Each full collection walks all of it, and the default thresholds start one
    every few thousand allocations' worth of young collections: measured on the trainer and dispatcher tests,
    11 s of 41 s of CPU. Freezing what collection built moves it out of the collector's sight, and a full
    collection every 1,000 middle ones (not 10) leaves the rest to the young generations; the price is memory
    (a worker's peak 0.5-0.8 GB, not 0.3). Not in a run with e2e tests: their time is the local stack's processes,
    and a test that leaves ``Popen`` objects behind (the demo that keeps its stack running) ignores their warning
    only while it runs, so they must be collected then, not at the end.
    """
    if any(item.get_closest_marker("e2e") for item in session.items):
        return
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, 1000)


@pytest.hookimpl(tryfirst=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """At the end of a run whose heap :func:`pytest_collection_finish` froze, freeze it again: the full collections
    left to do then (pytest's own, looking for unraisable exceptions, and the interpreter's at exit) would walk all
    that the tests left in the old generation, 3-7 s of each pytest-xdist worker's last seconds (D88). The cycles
    among it are not finalized; the tests' own warnings (an unclosed file freed by its count) were raised as they
    ran.
    """
    if gc.get_freeze_count():
        gc.freeze()


@pytest.fixture(scope="session")
def boto_session() -> boto3.Session:
    """One boto3 session (us-east-1, fake credentials) for clients the tests make under ``mock_aws``.

    ``mock_aws`` gives boto3 a new default session per test, and every client of a new session parses its
    service model again (about 50 ms a client); this one parses each model once.
    """
    return boto3.Session(region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing")


#: What a botocore session reads from the environment once and keeps: its credentials (the region and the endpoint
#: URLs it reads again for each client).
_SESSION_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")


class _SharedSession:
    """A boto3 session whose clients are made one at a time (boto3's sessions are not thread-safe), and kept
    while :data:`_KEEPING` says so.

    Making a client costs 6-20 ms of CPU, and each lambdas test makes about 9 (its experiment's and each handler
    runtime's). A client that reaches AWS, which in these tests is moto in-process (no endpoint URL), is then made
    once per configuration and environment and lent to one user per test; :meth:`take_back` undoes what the test
    registered on it (call counters, locks). Clients of local servers (an endpoint URL: a port per test) are made
    anew. Only for tests that leave no thread behind: a RolloutClient's poller outlives its ``close()`` by up to a
    long poll, and could make its calls on a client lent to the next test (whose call counts would then be off).
    """

    def __init__(self, session: boto3.Session) -> None:
        self._session = session
        self._lock = threading.Lock()
        #: Kept clients with their event handlers as made, by configuration and environment.
        self._kept: dict[tuple[Any, ...], list[tuple[Any, Any]]] = {}
        #: The kept clients lent since the last ``take_back``, by id: one user each.
        self._lent: dict[int, tuple[Any, Any]] = {}

    def client(self, service_name: str, **kwargs: Any) -> Any:
        key = _client_key(service_name, kwargs) if _KEEPING.is_set() else None
        with self._lock:
            if key is None:
                return self._session.client(service_name, **kwargs)
            kept = self._kept.setdefault(key, [])
            free = next((pair for pair in kept if id(pair[0]) not in self._lent), None)
            if free is None:
                client = self._session.client(service_name, **kwargs)
                free = (client, copy.copy(client.meta.events._emitter))
                kept.append(free)
            self._lent[id(free[0])] = free
            return free[0]

    def take_back(self) -> None:
        """Give the lent clients back their event handlers as made (botocore's own copy of an emitter)."""
        with self._lock:
            for client, handlers_as_made in self._lent.values():
                client.meta.events._emitter.__dict__ = copy.copy(handlers_as_made).__dict__
            self._lent.clear()


def _client_key(service_name: str, kwargs: dict[str, Any]) -> tuple[Any, ...] | None:
    """What a client of ``service_name`` made with ``kwargs`` depends on, ``None`` for one not to keep.

    A client reads its configuration from the environment when made (``AWS_*``: region, retry mode, endpoints).
    """
    endpoint_variables = ("AWS_ENDPOINT_URL", f"AWS_ENDPOINT_URL_{service_name.upper().replace('-', '_')}")
    if kwargs.get("endpoint_url") or any(os.environ.get(name) for name in endpoint_variables):
        return None
    config = kwargs.get("config")
    options = sorted(config._user_provided_options.items()) if config is not None else []
    environment = sorted(
        (name, value)
        for name, value in os.environ.items()
        if name.startswith("AWS_") and not name.startswith("AWS_ENDPOINT_URL")
    )
    other = sorted((name, value) for name, value in kwargs.items() if name != "config")
    return (service_name, repr(options), repr(other), tuple(environment))


#: Every shared session made in this process.
_SESSIONS: list[_SharedSession] = []
#: Set while a test that uses ``shared_clients`` runs.
_KEEPING = threading.Event()


@functools.cache
def _shared_session(
    region: str | None, credentials: tuple[tuple[str, str], ...], env: tuple[str | None, ...]
) -> _SharedSession:
    session = _SharedSession(new_session(region, dict(credentials) or None))
    _SESSIONS.append(session)
    return session


def shared_session(factory: ClientFactory) -> _SharedSession:
    """The shared session of ``factory``'s region and credentials in the current credential environment."""
    credentials = tuple(sorted((factory.credentials or {}).items()))
    return _shared_session(factory.region, credentials, tuple(os.environ.get(name) for name in _SESSION_ENV))


@pytest.fixture
def shared_sessions(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ``ClientFactory`` of the test takes its clients from one botocore session per region, credentials and
    credential environment, made once per test process (its clients stay the factory's own).

    A new session costs about 45 ms of CPU (botocore registers 2,580 handlers), and the trainer and lambdas tests
    build about 200 clients' worth of them: each RolloutClient and each handler runtime makes one.
    """
    monkeypatch.setattr(ClientFactory, "session", shared_session)


@pytest.fixture
def shared_clients(shared_sessions: None) -> Iterator[None]:
    """Shared sessions, whose clients that reach moto are kept from test to test (see :class:`_SharedSession`)."""
    _KEEPING.set()
    try:
        yield
    finally:
        _KEEPING.clear()
        for session in _SESSIONS:
            session.take_back()


@pytest.fixture
def fresh_venv(tmp_path: Path) -> Callable[..., Path]:
    """Make ``tmp_path/venv`` with uv and install one requirement into it (run from ``cwd``); return the venv.

    Skips the test when uv is not installed (``make install`` puts it in ``.venv``).
    """
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not installed (make install puts it in .venv)")

    def make(requirement: str, *, cwd: Path | None = None) -> Path:
        venv = tmp_path / "venv"
        subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True)
        python = str(venv / "bin" / "python")
        subprocess.run([uv, "pip", "install", "-q", "--python", python, requirement], cwd=cwd, check=True)
        return venv

    return make
