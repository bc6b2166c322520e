"""Typed emulator settings: the runtimes it hosts, their lifecycle, quotas and injected faults."""

from __future__ import annotations

import json
import random
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rollout_contract.protocol import (
    DEFAULT_ACTIVE_SESSION_QUOTA,
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_INVOKE_TPS,
    DEFAULT_MAX_LIFETIME_S,
    DEFAULT_QUALIFIER,
    MAX_PAYLOAD_BYTES,
    STARTUP_LIMIT_S,
    SYNC_INVOKE_LIMIT_S,
    runtime_id,
)

__all__ = ["ColdStartDelay", "ConfigError", "EmulatorConfig", "RuntimeConfig", "load_config"]


class ConfigError(ValueError):
    """An emulator config file is missing, unreadable or invalid."""


class ColdStartDelay(BaseModel):
    """Extra delay before a new agent process starts: fixed (``min_s == max_s``) or uniform in a range."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    min_s: float = Field(default=0.0, ge=0)
    max_s: float = Field(default=0.0, ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> ColdStartDelay:
        if self.max_s < self.min_s:
            raise ValueError(f"cold start delay max_s ({self.max_s}) must be >= min_s ({self.min_s})")
        return self

    @classmethod
    def fixed(cls, seconds: float) -> ColdStartDelay:
        """A delay of exactly ``seconds``."""
        return cls(min_s=seconds, max_s=seconds)

    def sample(self) -> float:
        """One delay in seconds."""
        return self.min_s if self.max_s == self.min_s else random.uniform(self.min_s, self.max_s)


class RuntimeConfig(BaseModel):
    """One agent runtime: how to start its process and how its sessions live.

    The command must serve the ACR container contract on ``127.0.0.1:$PORT``. Each session's process gets
    only ``environment``, the variables named in ``inherit_env`` (copied from the emulator's environment
    when set there) and the basics (``PATH``, ``LANG``/``LC_*``, ``PORT``, ``HOME``, ``TMPDIR``).

    ``preload`` (off when empty) switches the runtime to fork-server starts: a template process imports these
    modules once and each session's process is forked from it, then runs the command in-process. The command
    must then be ``[python, path.py, args...]`` or ``[python, -m, module, args...]``. Preload only modules
    whose import has no environment-dependent side effects: the import ran once, in the template, with the
    runtime's environment but not the session's ``PORT``, ``HOME``, ``TMPDIR`` or working directory, so
    anything a module reads from those at import (settings, clients, caches, loggers) is the template's.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    arn: str = Field(min_length=1)
    command: tuple[str, ...] = Field(min_length=1)
    working_dir: Path | None = Field(
        default=None,
        description="Directory every session's process starts in; None gives each session a fresh empty one.",
    )
    environment: dict[str, str] = Field(default_factory=dict)
    inherit_env: tuple[str, ...] = ()
    qualifiers: tuple[str, ...] = (DEFAULT_QUALIFIER,)
    idle_timeout_s: float = Field(default=DEFAULT_IDLE_TIMEOUT_S, gt=0)
    max_lifetime_s: float = Field(default=DEFAULT_MAX_LIFETIME_S, gt=0)
    startup_limit_s: float = Field(default=STARTUP_LIMIT_S, gt=0)
    invoke_timeout_s: float = Field(default=SYNC_INVOKE_LIMIT_S, gt=0)
    stop_grace_s: float = Field(default=5.0, ge=0)
    ping_interval_s: float = Field(default=2.0, gt=0)
    #: Invokes and stops per second per endpoint (qualifier), as ACR counts them.
    invoke_tps: float = Field(default=DEFAULT_INVOKE_TPS, gt=0)
    warm_pool_size: int = Field(default=0, ge=0)
    cold_start_delay: ColdStartDelay = ColdStartDelay()
    memory_limit_mb: int | None = Field(
        default=None,
        gt=0,
        description="Address space each session's process (and each process it starts) may map, in MiB; None: no "
        "limit. ACR gives a session a microVM of 8 GB; this is a per-process limit, not a total.",
    )
    nice: int = Field(
        default=0,
        ge=0,
        le=19,
        description="How much nicer than the emulator each session's process runs, as `nice -n` (what it starts "
        "inherits it). ACR runs a session in a microVM of its own, where it takes no CPU from AWS's services; on one "
        "machine a positive value lets the emulator and what stands in for those services run first.",
    )
    preload: tuple[str, ...] = Field(
        default=(),
        description="Modules a fork-server template imports once; each session is forked from it. Empty: off.",
    )

    @field_validator("arn")
    @classmethod
    def _arn_is_a_runtime_arn(cls, arn: str) -> str:
        if "?" in arn or arn != arn.strip():
            raise ValueError(f"runtime arn {arn!r} must not contain '?' or surrounding spaces")
        runtime_id(arn)  # the control plane addresses the runtime by the id its ARN ends in
        return arn

    @field_validator("preload")
    @classmethod
    def _preload_names_are_modules(cls, preload: tuple[str, ...]) -> tuple[str, ...]:
        bad = [name for name in preload if not all(part.isidentifier() for part in name.split("."))]
        if bad:
            raise ValueError(f"preload entries must be dotted module names like 'boto3' or 'strands.models'; got {bad}")
        return preload

    @model_validator(mode="after")
    def _preload_needs_a_python_command(self) -> RuntimeConfig:
        if self.preload and not _is_forkable(self.command):
            raise ValueError(
                "preload needs the command in one of the forms [python, path.py, args...] or "
                f"[python, -m, module, args...]; got {list(self.command)}. Drop preload or change the command."
            )
        return self


def _is_forkable(command: tuple[str, ...]) -> bool:
    if len(command) < 2 or not Path(command[0]).name.startswith("python"):
        return False
    if command[1] == "-m":
        return len(command) >= 3 and all(part.isidentifier() for part in command[2].split("."))
    return not command[1].startswith("-")


class EmulatorConfig(BaseModel):
    """The whole emulator: its runtimes and the account-wide quotas."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    runtimes: tuple[RuntimeConfig, ...] = Field(min_length=1)
    max_active_sessions: int = Field(default=DEFAULT_ACTIVE_SESSION_QUOTA, gt=0)
    max_payload_bytes: int = Field(default=MAX_PAYLOAD_BYTES, gt=0)
    invocation_log_size: int = Field(default=10_000, gt=0)
    ended_sessions_kept: int = Field(default=200, ge=0)
    cloudwatch_url: str | None = Field(
        default=None, description="Where ACR's runtime metrics are published (a CloudWatch endpoint; None: nowhere)."
    )
    metrics_interval_s: float = Field(default=5.0, gt=0, description="Seconds between two publications of them.")
    log_dir: Path | None = Field(
        default=None, description="Where each agent process's output goes; None sends it to the emulator's stderr."
    )

    @model_validator(mode="after")
    def _unique_arns(self) -> EmulatorConfig:
        arns = [r.arn for r in self.runtimes]
        duplicates = sorted({a for a in arns if arns.count(a) > 1})
        if duplicates:
            raise ValueError(f"runtime arns must be unique; repeated: {', '.join(duplicates)}")
        return self

    def runtime(self, arn: str) -> RuntimeConfig | None:
        """The runtime registered under ``arn``, or None."""
        return next((r for r in self.runtimes if r.arn == arn), None)


def load_config(path: str | Path) -> EmulatorConfig:
    """Read an :class:`EmulatorConfig` from a JSON file.

    Raises:
        ConfigError: the file is missing, is not JSON, or does not match the schema (the message says which
            field is wrong).
    """
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise ConfigError(f"emulator config {path} does not exist; pass --config with a JSON file") from e
    except json.JSONDecodeError as e:
        raise ConfigError(f"emulator config {path} is not valid JSON: {e}") from e
    try:
        return EmulatorConfig.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(f"emulator config {path} is invalid:\n{e}") from e
