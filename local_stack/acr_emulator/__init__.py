"""A local AgentCore Runtime (ACR) emulator that unmodified ``bedrock-agentcore`` boto3 clients talk to.

It serves ``InvokeAgentRuntime`` (``POST /runtimes/{arn}/invocations``) and ``StopRuntimeSession``
(``POST /runtimes/{arn}/stopruntimesession``) on 127.0.0.1 and runs every session as its own agent
process (the microVM analogue). Point boto3 at it with ``endpoint_url=emulator.url`` or
``AWS_ENDPOINT_URL_BEDROCK_AGENTCORE``; SigV4 headers are accepted and ignored.

- ``config``: :class:`EmulatorConfig`, :class:`RuntimeConfig`, :class:`ColdStartDelay`, :func:`load_config`.
- ``app``: :func:`create_app` (a Starlette app; its lifespan owns the processes).
- ``server``: :func:`serve` (in this process), :func:`start_emulator` -> :class:`EmulatorProcess` (background).
- ``sessions``: :class:`SessionManager` (lifecycle, warm pools, quotas, counters).
- ``forkserver``: the fork-server start mode (``preload``); ``_template.py`` is the template process it runs.
- ``errors``: the ACR errors it answers with.
- CLI: ``python -m local_stack.acr_emulator serve --config FILE [--port N]`` prints ``{"url": ...}`` on stdout
  once ready; ``... sessions --url URL`` and ``... stats --url URL`` print the admin views.

Config file (JSON; every field but ``runtimes[].arn`` and ``runtimes[].command`` is optional)::

    {
      "max_active_sessions": 1000,          # account quota; a new session beyond it -> 402
      "max_payload_bytes": 100000000,        # larger request bodies -> 400
      "invocation_log_size": 10000,         # accepted-invoke timestamps kept per runtime
      "ended_sessions_kept": 200,           # ended sessions shown by /_admin/sessions
      "log_dir": null,                      # per-process log files; null: the emulator's stderr
      "runtimes": [{
        "arn": "arn:aws:bedrock-agentcore:us-east-1:123456789012:runtime/my_agent-abc123",
        "command": ["/path/to/python", "/path/to/agent.py"],
        "working_dir": null,                # null: a fresh empty directory per session
        "environment": {"MODEL_URL": "http://127.0.0.1:8000"},
        "inherit_env": ["AWS_ENDPOINT_URL_S3"],   # copied from the emulator's environment when set
        "qualifiers": ["DEFAULT"],          # endpoint names accepted in ?qualifier=
        "idle_timeout_s": 900, "max_lifetime_s": 28800, "startup_limit_s": 60,
        "invoke_timeout_s": 900, "stop_grace_s": 5, "ping_interval_s": 2,
        "invoke_tps": 25,                   # per endpoint (qualifier): token bucket (burst 1 s), invokes and stops
        "warm_pool_size": 0,                # fresh, never-used processes kept ready
        "cold_start_delay": {"min_s": 0, "max_s": 0},  # injected before each process start
        "nice": 0,                          # how much nicer than the emulator sessions run (`nice -n`), 0-19
        "preload": []                       # modules to import once in a fork-server template; [] = off
      }]
    }

Agent processes: the command serves the ACR container contract on port 8080, as in ACR (a plain
``app.run()``), or on ``127.0.0.1:$PORT``. Every session has its own 8080: a Python agent's bind to port 8080
binds the session's ``PORT`` instead (``agent_site/sitecustomize.py``, first on the agent's ``PYTHONPATH``;
a bind to 0.0.0.0 becomes one to 127.0.0.1), so sessions run side by side on one host, as ACR's microVMs do
(D53). Each gets its own ``HOME``, ``TMPDIR`` and working directory (removed when the session ends), its
own process group, and an environment holding only ``PATH``, ``LANG``/``LC_*``/``TZ``, ``PORT``,
``PYTHONPATH``, ``HOME``, ``TMPDIR``, the runtime's ``environment`` and its ``inherit_env`` names.

Fork-server starts (``preload``, off by default): a runtime that lists modules in ``preload`` gets a template
process (launched with the emulator) that imports them once with the runtime's environment; each new session's
process is then forked from it (copy-on-write) instead of started with ``exec``, so it no longer pays for those
imports (the math agent's Strands/openai/boto3 imports cost about 1 s of CPU per process; see
``benchmarks/acr_emulator_bench.py``). The forked process becomes its own session and process group, takes the
session's environment (as above), ``HOME``, ``TMPDIR``, working directory and log, and runs the command in-process
as ``python path.py args...`` or ``python -m module args...`` would (``__name__ == "__main__"``, ``sys.argv``,
``sys.path[0]``); any other command shape is a config error. It still serves exactly one session, and everything
else (pings, idle and max lifetime, stop, crash, kill, warm pool, cold-start delay, quotas, logs) is as above.
The template starts no thread or event loop (a preload that starts a thread is refused), reaps its children and
reports their pids and exits over JSON lines on its stdin/stdout. If it dies, the processes it forked are killed
(their sessions end as crashed), the emulator logs it and the next session start launches a new one; a preload
that fails to import fails that start with 424 ``RuntimeClientError`` naming the module. ``/_admin/stats`` shows
each template under ``fork_servers``. Caveat: preload only modules whose import has no environment-dependent
side effects. The import ran once, in the template, without the session's ``PORT``, ``HOME``, ``TMPDIR`` or
working directory, so whatever a module reads or builds at import (settings from the environment, clients,
caches, loggers, open files, random state other than :mod:`random`'s) is the template's and shared by every
session; forked sessions also share the template's hash seed and show its command line in ``ps``.

Sessions end on ``StopRuntimeSession`` (SIGTERM, SIGKILL after ``stop_grace_s``), after ``idle_timeout_s``
without activity (an invoke in flight, a ``HealthyBusy`` ping or a moving ``time_of_last_update``), at
``max_lifetime_s``, or when the process exits (a crash). As in ACR, an invoke with the id of an ended session
starts a fresh session. Not ready within ``startup_limit_s`` -> 424 ``RuntimeClientError``; an agent answering
4xx/5xx -> 424 as well. Stopping an unknown session -> 404.

Admin: ``GET /_admin/sessions``, ``GET /_admin/stats``, ``GET /_admin/invocations``, ``GET /_admin/calls``
(every call that took a token, per endpoint: time, ``invoke`` or ``stop``, session id) and
``POST /_admin/sessions/{session_id}/kill`` (SIGKILL, returns once the session has ended).
"""

from local_stack.acr_emulator.app import create_app
from local_stack.acr_emulator.config import ColdStartDelay, ConfigError, EmulatorConfig, RuntimeConfig, load_config
from local_stack.acr_emulator.errors import (
    EmulatorError,
    InvalidRequestError,
    NotFoundError,
    RuntimeClientError,
    SessionQuotaExceededError,
    ThrottledError,
)
from local_stack.acr_emulator.server import EmulatorProcess, EmulatorStartError, serve, start_emulator
from local_stack.acr_emulator.sessions import EndReason, SessionManager, SessionState

__all__ = [
    "ColdStartDelay",
    "ConfigError",
    "EmulatorConfig",
    "EmulatorError",
    "EmulatorProcess",
    "EmulatorStartError",
    "EndReason",
    "InvalidRequestError",
    "NotFoundError",
    "RuntimeClientError",
    "RuntimeConfig",
    "SessionManager",
    "SessionQuotaExceededError",
    "SessionState",
    "ThrottledError",
    "create_app",
    "load_config",
    "serve",
    "start_emulator",
]
