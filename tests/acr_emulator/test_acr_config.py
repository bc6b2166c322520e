"""Config validation, the token bucket and the public surface (no servers)."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

import local_stack.acr_emulator as acr_emulator
from local_stack.acr_emulator import ColdStartDelay, ConfigError, EmulatorConfig, RuntimeConfig, load_config
from local_stack.acr_emulator.quotas import TokenBucket
from rollout_contract.protocol import (
    DEFAULT_ACTIVE_SESSION_QUOTA,
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_INVOKE_TPS,
    DEFAULT_MAX_LIFETIME_S,
    STARTUP_LIMIT_S,
)

ARN = "arn:aws:bedrock-agentcore:us-east-1:123456789012:runtime/a"


def test_defaults_are_acr_published_values():
    # GIVEN a runtime with only an ARN and a command
    config = EmulatorConfig(runtimes=[RuntimeConfig(arn=ARN, command=["agent"])])
    runtime = config.runtimes[0]
    # THEN lifecycle and quotas default to ACR's published numbers
    assert (runtime.idle_timeout_s, runtime.max_lifetime_s) == (DEFAULT_IDLE_TIMEOUT_S, DEFAULT_MAX_LIFETIME_S)
    assert (runtime.startup_limit_s, runtime.invoke_tps) == (STARTUP_LIMIT_S, DEFAULT_INVOKE_TPS)
    assert config.max_active_sessions == DEFAULT_ACTIVE_SESSION_QUOTA
    # the API model's payload limit is decimal: 100,000,000 bytes (104,857,600 = 100 MiB is over it)
    assert config.max_payload_bytes == 100_000_000


def test_duplicate_runtime_arns_are_rejected():
    # GIVEN two runtimes with one ARN
    runtime = RuntimeConfig(arn=ARN, command=["agent"])
    # WHEN the config is built
    # THEN it fails naming the ARN
    with pytest.raises(ValidationError, match="repeated"):
        EmulatorConfig(runtimes=[runtime, runtime])


def test_cold_start_delay_range_must_be_ordered_and_samples_within_it():
    # GIVEN a reversed range and a valid one
    with pytest.raises(ValidationError, match="max_s"):
        ColdStartDelay(min_s=2, max_s=1)
    delay = ColdStartDelay(min_s=0.1, max_s=0.2)
    # THEN samples stay inside the valid range, and a fixed delay is exact
    assert all(0.1 <= delay.sample() <= 0.2 for _ in range(100))
    assert ColdStartDelay.fixed(0.5).sample() == 0.5


def test_config_round_trips_through_a_json_file(tmp_path):
    # GIVEN a config written as JSON
    config = EmulatorConfig(runtimes=[RuntimeConfig(arn=ARN, command=["agent", "--x"], warm_pool_size=2)])
    path = tmp_path / "c.json"
    path.write_text(config.model_dump_json())
    # WHEN it is loaded
    # THEN it equals the original
    assert load_config(path) == config


@pytest.mark.parametrize(
    ("content", "expected"),
    [(None, "does not exist"), ("{not json", "not valid JSON"), (json.dumps({"runtimes": []}), "invalid")],
)
def test_load_config_explains_what_is_wrong(tmp_path, content, expected):
    # GIVEN a missing, malformed or schema-breaking file
    path = tmp_path / "c.json"
    if content is not None:
        path.write_text(content)
    # WHEN it is loaded
    # THEN ConfigError says why
    with pytest.raises(ConfigError, match=expected):
        load_config(path)


def test_token_bucket_allows_a_burst_then_the_rate():
    # GIVEN a 5/s bucket on a controlled clock
    now = [0.0]
    bucket = TokenBucket(5, clock=lambda: now[0])
    # WHEN 10 tokens are asked for at once, then again after 0.4 s
    burst = sum(bucket.try_take() for _ in range(10))
    now[0] = 0.4
    later = sum(bucket.try_take() for _ in range(10))
    # THEN the burst is 5 and 0.4 s refills 2
    assert (burst, later) == (5, 2)


@pytest.mark.parametrize(
    "command",
    [
        ("node", "agent.js"),
        ("python",),
        ("python", "-u", "agent.py"),
        ("python", "-m"),
        ("python", "-m", "not a module"),
    ],
)
def test_preload_with_a_command_it_cannot_fork_is_rejected_naming_the_forms(command):
    # GIVEN a command that is not [python, path.py, ...] or [python, -m, module, ...]
    # WHEN a runtime with preload is built with it
    # THEN the config is rejected, naming the accepted forms
    with pytest.raises(ValidationError, match=r"preload needs the command in one of the forms \[python, path.py"):
        RuntimeConfig(arn=ARN, command=command, preload=("json",))


@pytest.mark.parametrize(
    "command", [("/venv/bin/python", "agent.py", "--flag"), ("python3.11", "-m", "pkg.agent", "--flag")]
)
def test_preload_accepts_a_script_or_a_module_command(command):
    # GIVEN a python script or module command
    # WHEN a runtime with preload is built with it
    runtime = RuntimeConfig(arn=ARN, command=command, preload=("json", "email.parser"))
    # THEN it is accepted, and preload stays off by default
    assert runtime.preload == ("json", "email.parser")
    assert RuntimeConfig(arn=ARN, command=command).preload == ()


def test_preload_entries_must_be_module_names():
    # GIVEN a preload entry that is a path, not a module name
    # WHEN the runtime is built
    # THEN it is rejected, saying what a preload entry must look like
    with pytest.raises(ValidationError, match="dotted module names"):
        RuntimeConfig(arn=ARN, command=("python", "agent.py"), preload=("strands/models",))


def test_package_exports_match_all():
    # GIVEN the package's __all__
    # THEN every name exists and is public
    assert all(hasattr(acr_emulator, name) for name in acr_emulator.__all__)
    assert sorted(acr_emulator.__all__) == acr_emulator.__all__
