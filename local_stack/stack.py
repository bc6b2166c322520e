"""The whole pipeline on one machine: :class:`LocalStack` starts, provisions, waits for and stops it.

Processes, each on 127.0.0.1 with a port the OS chose, logs under the run directory (``.local-stack/``):

- ``moto``: S3, EventBridge, SQS, DynamoDB, SSM (:mod:`local_stack.moto_server`), then provisioning
  (:mod:`local_stack.provision`) of the shared resources and every experiment;
- ``model``: the stand-in model (:mod:`local_stack.model_endpoint`), unless a real endpoint is given;
- ``gateway``: the token gateway in front of the model (:mod:`local_stack.gateway`);
- ``emulator``: the ACR emulator hosting the caller's agent (``agent_command``, or a
  :class:`~local_stack.hosting.LocalAgent`'s :meth:`~local_stack.hosting.LocalAgent.settings`), one runtime per
  experiment;
- ``worker-<exp>`` (finisher), ``worker-<exp>-sweeper``, ``worker-<exp>-dispatcher-<i>`` and
  ``worker-<exp>-finisher-<i>`` (from 1, when ``finisher_environments`` > 1): the local Lambda workers of
  each experiment (:mod:`local_stack.worker`), one process per execution environment signing with its function's
  key, each under a supervisor (:mod:`local_stack.supervisor`) that starts a new one when it dies, as Lambda does.

With ``record_calls``, the moto server and the emulator record every AWS call by whose key signed it
(:mod:`local_stack.call_log`); :meth:`LocalStack.recorded_calls` reads them.

``stop()`` (also on Ctrl-C inside ``with LocalStack(...)``) stops them in reverse order, each with its
process group, so agent processes started by the emulator go too. One stack per run directory
(:mod:`local_stack.run_dir`): ``start()`` records ``state.json`` and refuses while a stack recorded there runs.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator

from local_stack._process import LOCALHOST, ManagedProcess, http_ready
from local_stack.call_log import CALL_LOG_ENV, RecordedCall, read_calls
from local_stack.gateway import gateway_process
from local_stack.hosting import DEFAULT_AGENT_NAME, validate_agent_name
from local_stack.model_endpoint import EndpointSettings
from local_stack.model_endpoint.process import model_endpoint_process
from local_stack.moto_server import (
    LOCAL_ACCOUNT_ID,
    LOCAL_REGION,
    MOTO_SERVICES,
    aws_env,
    credentials,
    endpoints_for,
    moto_process,
)
from local_stack.provision import AwsClients, provision_experiment, provision_shared
from local_stack.run_dir import STATE_FILE, guard, read_state
from local_stack.worker import DEFAULT_HANDLERS
from rollout_contract.ids import validate_experiment
from rollout_contract.proof import UnprovenResults
from rollout_contract.protocol import (
    DEFAULT_INVOKE_TPS,
    DEFAULT_QUALIFIER,
    MAX_RUNTIME_ENDPOINTS,
    endpoint_qualifiers,
    runtime_id,
)
from rollout_contract.resources import DEFAULT_SESSION_BUDGET, ExperimentDescriptor, ExperimentKind
from rollout_contract.settings import PathValue, Settings

__all__ = [
    "AGENT_NICENESS",
    "DEFAULT_RUN_DIR",
    "LAMBDA_INITIAL_POLLERS",
    "PROJECT_ROOT",
    "LocalStack",
    "StackSettings",
    "agent_environment",
    "agent_runtime",
    "runtime_arn",
    "start",
    "stop",
]

PROJECT_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_RUN_DIR = Path(".local-stack")
#: Batches Lambda's SQS event source hands a function at once from the start (it adds more under a backlog).
LAMBDA_INITIAL_POLLERS = 5
#: Niceness of the agents' processes (the emulator's ``nice``): ACR runs each session in a microVM of its own, so on
#: one machine the agents take the CPU the stand-ins for AWS's services, the workers and the trainer leave (D105).
AGENT_NICENESS = 10


def runtime_arn(exp_id: str, agent_name: str = DEFAULT_AGENT_NAME) -> str:
    """Return the local runtime ARN of experiment ``exp_id``'s agent ``agent_name`` (ACR's ARN form)."""
    name = validate_agent_name(agent_name)
    return f"arn:aws:bedrock-agentcore:{LOCAL_REGION}:{LOCAL_ACCOUNT_ID}:runtime/{name}-{validate_experiment(exp_id)}"


class StackSettings(Settings):
    """What the local stack runs.

    Attributes:
        run_dir: logs, configs, the gateway's trace database and ``state.json``.
        experiments: experiment ids to provision, each with a runtime and a worker.
        model_base_url: a real OpenAI-compatible endpoint (``http://host:port/v1``) instead of the stand-in.
        model: the stand-in's settings (seed, simulated latency).
        model_id: the model name the descriptor offers trainers that name none (default: the stack's own model's
            name; none with ``model_base_url``).
        required_rollout_fields: ``_rollout`` fields the agent needs, published in the descriptor (trainers
            refuse a submit without them).
        unproven_results: what the experiments' readers do with a result its agent did not sign, published in the
            descriptor (``accept`` for ART's own agents; D100).
        gateway: put the token gateway in front of the model.
        gateway_open: let every caller use the gateway (default: the experiments' model-call and admin keys, D100);
            for a client that cannot send a key (rLLM's gateway client has no such setting).
        emulator: run the ACR emulator (tests of the other parts turn it off).
        workers: run a Lambda worker per experiment.
        agent_name: the agent's runtime name; its ARN is ``runtime/<agent_name>-<exp_id>`` (:func:`runtime_arn`).
        agent_command: the agent process each session runs (needed with the emulator); it listens on ``PORT``.
        agent_working_dir: where the agent's processes start (default: the project's root).
        runtime_arns: experiment id -> the ARN its runtime has instead of :func:`runtime_arn`'s: a runtime created
            outside this stack's naming, as ``cdk deploy -c runtime_arn=...`` adopts one in AWS.
        agent_environment: more variables for the agent's processes (see :func:`agent_environment`).
        kind: what the runtime hosts, published in every experiment's descriptor: an agent (rollouts), or ART's
            sandbox daemon (``local_stack.sandbox.sandbox_settings``; its sessions start in a fresh directory each,
            not in ``agent_working_dir``).
        handlers: dotted handler paths per role (``dispatcher``, ``finisher``, ``sweeper``).
        dispatcher_environments: dispatcher worker processes per experiment. Each is one Lambda execution
            environment (one invocation at a time, batch records handled in parallel inside it), like
            the dispatcher's concurrency in AWS; the sweeper has one process.
        finisher_environments: finisher execution environments (processes) per experiment: five, as Lambda's SQS
            event source runs five finisher batches at once from the start. Each batch waits for its slowest stop
            (the agent's process ending), so with one a backlog's results waited behind those stops and the
            sessions table learned of an end 60-145 s late at a backlog (D104).
        sweep_interval_s: seconds between sweeper runs.
        extra_pythonpath: directories prepended to the workers' ``PYTHONPATH`` (for test handlers).
        ready_timeout_s: how long each process may take to become ready.
        tps_limit: the dispatchers' invoke budget per runtime (default: ``HandlerSettings``'s, ACR's 25/s).
        session_budget: the dispatchers' active-session budget (default: ``HandlerSettings``'s).
        endpoints: endpoints of each experiment's runtime (``DEFAULT``, ``endpoint_1``, ...), each with its own
            invoke rate in the emulator (``invoke_tps``) and its own invoke budget (``tps_limit``), as in AWS.
        runtime_options: more ``RuntimeConfig`` fields for every runtime of the emulator (``invoke_tps``,
            ``warm_pool_size``, ``preload``, ``idle_timeout_s``, ``cold_start_delay``, ...).
        emulator_options: more ``EmulatorConfig`` fields (``max_active_sessions``, ...).
        record_calls: record every AWS call of every component (:meth:`LocalStack.recorded_calls`).
    """

    run_dir: PathValue = DEFAULT_RUN_DIR
    experiments: tuple[str, ...] = ("demo",)
    model_base_url: str | None = None
    model: EndpointSettings = Field(default_factory=EndpointSettings)
    model_id: str | None = None
    required_rollout_fields: tuple[str, ...] = ()
    unproven_results: UnprovenResults = UnprovenResults.REJECT
    gateway: bool = True
    gateway_open: bool = False
    emulator: bool = True
    workers: bool = True
    agent_name: str = DEFAULT_AGENT_NAME
    agent_command: tuple[str, ...] = ()
    agent_working_dir: PathValue | None = None
    agent_environment: Mapping[str, str] = Field(default_factory=dict)
    runtime_arns: Mapping[str, str] = Field(default_factory=dict)
    kind: ExperimentKind = ExperimentKind.AGENT
    handlers: Mapping[str, str] = Field(default_factory=lambda: dict(DEFAULT_HANDLERS))
    dispatcher_environments: int = Field(default=2, ge=1)
    finisher_environments: int = Field(default=LAMBDA_INITIAL_POLLERS, ge=1)
    sweep_interval_s: float = Field(default=5.0, gt=0)
    extra_pythonpath: tuple[PathValue, ...] = ()
    ready_timeout_s: float = Field(default=60.0, gt=0)
    tps_limit: float | None = Field(default=None, gt=0)
    session_budget: int | None = Field(default=None, ge=1)
    endpoints: int = Field(default=1, ge=1, le=MAX_RUNTIME_ENDPOINTS)
    runtime_options: Mapping[str, Any] = Field(default_factory=dict)
    emulator_options: Mapping[str, Any] = Field(default_factory=dict)
    record_calls: bool = False

    @field_validator("experiments")
    @classmethod
    def _experiments(cls, experiments: tuple[str, ...]) -> tuple[str, ...]:
        if not experiments:
            raise ValueError("give at least one experiment id")
        return tuple(validate_experiment(exp_id) for exp_id in experiments)

    @field_validator("agent_name")
    @classmethod
    def _agent_name(cls, name: str) -> str:
        return validate_agent_name(name)

    @field_validator("handlers")
    @classmethod
    def _handlers(cls, handlers: Mapping[str, str]) -> Mapping[str, str]:
        unknown = set(handlers) - set(DEFAULT_HANDLERS)
        if unknown:
            raise ValueError(f"unknown handler roles {sorted(unknown)}; use {sorted(DEFAULT_HANDLERS)}")
        return handlers

    @field_validator("model_base_url")
    @classmethod
    def _model_base_url(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith(("http://", "https://")):
            raise ValueError(f"model_base_url must be an http(s) URL ending in /v1, got {url!r}")
        return url

    @model_validator(mode="after")
    def _runtime(self) -> StackSettings:
        for exp_id, arn in self.runtime_arns.items():
            if exp_id not in self.experiments:
                raise ValueError(
                    f"runtime_arns names experiment {exp_id!r}, which is not one of {list(self.experiments)}"
                )
            runtime_id(arn)
        if self.emulator and not self.agent_command:
            raise ValueError(
                "the emulator needs the agent to host: give agent_command (or use LocalAgent(...).settings(...)), "
                "or emulator=False"
            )
        return self


class LocalStack:
    """The local stack's processes; a context manager that stops everything on exit.

    After :meth:`start`: ``moto_url``, ``model_url`` (``.../v1``), ``gateway_url``, ``emulator_url``,
    ``descriptors`` (per experiment) and ``env`` (what a trainer process needs to use the stack).
    """

    def __init__(self, settings: StackSettings | None = None, *, owner: str = "LocalStack.start()") -> None:
        self.settings = settings or StackSettings()
        self.owner = owner
        self.run_dir = self.settings.run_dir.resolve()
        self.processes: list[ManagedProcess] = []
        self.moto_url: str | None = None
        self.model_url: str | None = None
        self.gateway_url: str | None = None
        self.emulator_url: str | None = None
        self.descriptors: dict[str, ExperimentDescriptor] = {}
        self.env: dict[str, str] = {}
        self.started_at: float | None = None

    def __enter__(self) -> LocalStack:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start every process, provision the resources, wait until all are ready, record ``state.json``.

        Raises:
            StackRunningError: a stack recorded in the run directory still runs (one stack per run directory).
            ProcessStartError: a process exited or was not ready in time (everything started is stopped).
        """
        with guard(self.run_dir, self.owner):
            self.started_at = time.time()
            try:
                self._start()
            except BaseException:
                self.stop()
                raise
            (self.run_dir / STATE_FILE).write_text(json.dumps(self.state(), indent=2))

    def stop(self) -> None:
        """Stop every process (reverse start order), reap it, and drop this stack's ``state.json``."""
        while self.processes:
            self.processes.pop().stop()
        state = read_state(self.run_dir) if self.started_at is not None else None
        if state is not None and state.get("started_at") == self.started_at:
            (self.run_dir / STATE_FILE).unlink(missing_ok=True)

    def _launch(self, process: ManagedProcess) -> ManagedProcess:
        self.processes.append(process)
        process.start()
        return process

    def _start(self) -> None:
        s = self.settings
        base_env = {
            **os.environ,
            "PYTHONPATH": _pythonpath(PROJECT_ROOT, os.environ.get("PYTHONPATH")),
            # Everything talks over 127.0.0.1: keep any configured HTTP proxy out of it.
            "NO_PROXY": _no_proxy(LOCALHOST, os.environ.get("NO_PROXY")),
        }
        moto = self._launch(moto_process(self.run_dir / "moto.log", {**base_env, **self._call_log_env("moto")}))
        self.moto_url = moto_url = moto.url
        if moto_url is None:
            raise RuntimeError("the moto server process has no URL")
        model = None
        if s.model_base_url is None:
            model = self._launch(model_endpoint_process(run_dir=self.run_dir, base_env=base_env, settings=s.model))
        emulator = self._launch(self._emulator_process(base_env)) if s.emulator else None
        if model is not None:
            model.wait_ready(s.ready_timeout_s)
            model_url = f"{model.url}/v1"
        else:
            model_url = str(s.model_base_url)
        self.model_url = model_url
        if s.gateway:
            # The gateway runs as the trainer does (it reads the experiments' gateway keys, D100).
            gateway = self._launch(
                gateway_process(
                    model_base_url=model_url,
                    run_dir=self.run_dir,
                    base_env={**base_env, **aws_env(moto_url, component="trainer")},
                    experiments=() if s.gateway_open else s.experiments,
                )
            )
            self.gateway_url = gateway.url
        if emulator is not None:
            emulator.wait_ready(s.ready_timeout_s)
            self.emulator_url = emulator.url
        moto.wait_ready(s.ready_timeout_s)
        # A process of this stack's caller is a trainer (clients, `rollouts local status --env`).
        self.env = aws_env(moto_url, self.emulator_url, component="trainer")
        self._provision()
        child_env = {**base_env, **self.env}
        if model is not None and s.model.tinker:
            self.env["TINKER_BASE_URL"] = str(model.url)  # the tinker SDK's endpoint (`rollouts local up --tinker`)
        if s.workers:
            child_env["PYTHONPATH"] = os.pathsep.join([*map(str, s.extra_pythonpath), base_env["PYTHONPATH"]])
            for exp_id in s.experiments:
                self._launch(self._worker_process(exp_id, child_env, f"worker-{exp_id}", ("finisher",)))
                self._launch(self._worker_process(exp_id, child_env, f"worker-{exp_id}-sweeper", ("sweeper",)))
                for index in range(s.dispatcher_environments):
                    name = f"worker-{exp_id}-dispatcher-{index}"
                    self._launch(self._worker_process(exp_id, child_env, name, ("dispatcher",)))
                for index in range(1, s.finisher_environments):
                    name = f"worker-{exp_id}-finisher-{index}"
                    self._launch(self._worker_process(exp_id, child_env, name, ("finisher",)))
        for process in self.processes:
            process.wait_ready(s.ready_timeout_s)

    def _provision(self) -> None:
        clients = AwsClients.local(self._moto_url())
        provision_shared(clients)
        endpoints = endpoints_for(self._moto_url(), self.emulator_url)
        for exp_id in self.settings.experiments:
            provisioned = provision_experiment(
                clients,
                exp_id,
                region=LOCAL_REGION,
                runtime_arn=self.runtime_arn(exp_id),
                endpoints=endpoints,
                gateway_url=self.gateway_url,
                model_id=self.published_model_id,
                required_rollout_fields=self.settings.required_rollout_fields,
                unproven_results=self.settings.unproven_results,
                kind=self.settings.kind,
                tps_limit=self.settings.tps_limit or DEFAULT_INVOKE_TPS,
                session_budget=self.settings.session_budget or DEFAULT_SESSION_BUDGET,
                runtime_endpoints=self.settings.endpoints,
            )
            self.descriptors[exp_id] = provisioned.descriptor

    @property
    def published_model_id(self) -> str | None:
        """The model name the descriptors offer: the settings' ``model_id``, else the stack's own model's name."""
        s = self.settings
        return s.model_id or (None if s.model_base_url else s.model.model_name)

    def _moto_url(self) -> str:
        if self.moto_url is None:
            raise RuntimeError("the moto server's URL is not known yet: start the stack first")
        return self.moto_url

    def runtime_arn(self, exp_id: str) -> str:
        """The ARN of experiment ``exp_id``'s runtime: the one given in ``runtime_arns``, else :func:`runtime_arn`'s."""
        return self.settings.runtime_arns.get(exp_id) or runtime_arn(exp_id, self.settings.agent_name)

    def emulator_config(self) -> dict[str, Any]:
        """The ACR emulator's config: the agent registered once per experiment."""
        runtimes = [
            agent_runtime(self.settings, self.runtime_arn(exp_id), self._moto_url())
            for exp_id in self.settings.experiments
        ]
        return {**self.settings.emulator_options, "runtimes": runtimes, "cloudwatch_url": self._moto_url()}

    def _emulator_process(self, base_env: Mapping[str, str]) -> ManagedProcess:
        config_path = self.run_dir / "emulator.json"
        config_path.write_text(json.dumps(self.emulator_config(), indent=2))
        log_path = self.run_dir / "emulator.log"
        log_path.unlink(missing_ok=True)
        process = ManagedProcess(
            name="emulator",
            argv=[
                sys.executable,
                "-m",
                "local_stack.acr_emulator",
                "serve",
                "--config",
                str(config_path),
                "--host",
                LOCALHOST,
                "--port",
                "0",
                "--log-level",
                "INFO",
            ],
            log_path=log_path,
            env={**base_env, **self._call_log_env("emulator")},
            cwd=PROJECT_ROOT,
        )

        def ready() -> bool:
            if process.url is None:
                process.url = _announced_url(log_path)
                if process.url is None:
                    return False
            return http_ready(f"{process.url}/_admin/stats")()

        process.ready = ready
        return process

    def _worker_process(self, exp_id: str, env: Mapping[str, str], name: str, roles: tuple[str, ...]) -> ManagedProcess:
        """A local worker process running the handlers of ``roles`` (the others off), restarted when it dies."""
        s = self.settings
        ready_file = self.run_dir / f"{name}.ready"
        ready_file.unlink(missing_ok=True)
        handlers = [
            arg for role in DEFAULT_HANDLERS for arg in (f"--{role}", s.handlers.get(role, "") if role in roles else "")
        ]
        budgets = [
            arg
            for flag, value in (("--tps-limit", s.tps_limit), ("--session-budget", s.session_budget))
            if value is not None
            for arg in (flag, str(value))
        ]
        return ManagedProcess(
            name=name,
            argv=[
                sys.executable,
                "-m",
                "local_stack.supervisor",
                "--pid-file",
                str(self.worker_pid_file(name)),
                "--ready-file",
                str(ready_file),
                "--",
                sys.executable,
                "-m",
                "local_stack.worker",
                "--exp",
                exp_id,
                *handlers,
                *budgets,
                "--sweep-interval",
                str(s.sweep_interval_s),
                "--ready-file",
                str(ready_file),
            ],
            log_path=self.run_dir / f"{name}.log",
            env={**env, **credentials(roles[0])},
            cwd=PROJECT_ROOT,
            ready=ready_file.exists,
        )

    def _call_log_env(self, server: str) -> dict[str, str]:
        """The variable that makes ``server`` record its calls (a fresh file), when ``record_calls`` is on."""
        if not self.settings.record_calls:
            return {}
        path = self.run_dir / f"calls-{server}.jsonl"
        path.unlink(missing_ok=True)
        return {CALL_LOG_ENV: str(path)}

    def recorded_calls(self) -> list[RecordedCall]:
        """Every AWS call recorded so far (``record_calls``): the moto server's, then the emulator's."""
        return read_calls(self.run_dir / f"calls-{server}.jsonl" for server in ("moto", "emulator"))

    def worker_pid_file(self, name: str) -> Path:
        """Where the supervisor of worker ``name`` writes its current worker's pid (the execution environment)."""
        return self.run_dir / f"{name}.pid"

    def worker_names(self) -> list[str]:
        """The names of the worker processes (one per execution environment)."""
        return [p.name for p in self.processes if p.name.startswith("worker-")]

    def state(self) -> dict[str, Any]:
        """What ``rollouts local status`` shows: pids, urls, logs and the trainer's environment."""
        return {
            "run_dir": str(self.run_dir),
            "owner": self.owner,
            "started_at": self.started_at,
            "experiments": list(self.settings.experiments),
            "urls": {
                "moto": self.moto_url,
                "model": self.model_url,
                "gateway": self.gateway_url,
                "emulator": self.emulator_url,
            },
            "processes": [
                {"name": p.name, "pid": p.pid, "argv": list(p.argv), "log": str(p.log_path), "url": p.url}
                for p in self.processes
            ],
            "env": self.env,
        }


def agent_environment(settings: StackSettings, s3_endpoint: str | None) -> dict[str, str]:
    """The variables the stack gives the agent's processes: the local region and credentials, results to
    ``s3_endpoint`` (the moto server, which also keeps the experiment's model-call key in its Secrets Manager),
    ``PYTHONPATH`` with the project, then ``settings.agent_environment``."""
    extra = dict(settings.agent_environment)
    env = {"AWS_REGION": LOCAL_REGION, "AWS_DEFAULT_REGION": LOCAL_REGION, **credentials("agent")}
    if s3_endpoint is not None:
        env["AWS_ENDPOINT_URL_S3"] = s3_endpoint
        env[f"AWS_ENDPOINT_URL_{MOTO_SERVICES['secretsmanager']}"] = s3_endpoint
    env["PYTHONPATH"] = os.pathsep.join(
        [*([extra.pop("PYTHONPATH")] if "PYTHONPATH" in extra else []), str(PROJECT_ROOT)]
    )
    return {**env, **extra}


def agent_runtime(settings: StackSettings, arn: str, s3_endpoint: str | None) -> dict[str, Any]:
    """The emulator's runtime entry (``RuntimeConfig`` fields) that hosts the stack's agent under ``arn``."""
    runtime: dict[str, Any] = {
        "arn": arn,
        "command": list(settings.agent_command),
        "environment": agent_environment(settings, s3_endpoint),
        "qualifiers": list(endpoint_qualifiers(DEFAULT_QUALIFIER, settings.endpoints)),
        "nice": AGENT_NICENESS,
        **settings.runtime_options,
    }
    if settings.kind is ExperimentKind.AGENT:  # a sandbox session starts in a fresh directory of its own
        runtime["working_dir"] = str(settings.agent_working_dir or PROJECT_ROOT)
    return runtime


def _pythonpath(first: Path, rest: str | None) -> str:
    return os.pathsep.join([str(first), *([rest] if rest else [])])


def _no_proxy(first: str, rest: str | None) -> str:
    return ",".join([first, "localhost", *([rest] if rest else [])])


def _announced_url(log_path: Path) -> str | None:
    """The URL the emulator prints as ``{"url": ...}`` once it listens."""
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("{") and '"url"' in line:
            try:
                url: str = json.loads(line)["url"]
                return url
            except (json.JSONDecodeError, KeyError, TypeError):
                continue
    return None


def start(settings: StackSettings | None = None) -> LocalStack:
    """Start a local stack and return it (stop it with :func:`stop` or ``stack.stop()``)."""
    stack = LocalStack(settings)
    stack.start()
    return stack


def stop(stack: LocalStack) -> None:
    """Stop every process of ``stack``."""
    stack.stop()
