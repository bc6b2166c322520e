"""ART 0.2.0's public surface, name by name, against ours (``agent_app`` and ``trainer_client``).

Every name ART's top level exports, every public attribute and method of each (instance attributes read from
objects made ART's way), the parameters of each method and constructor (name, position, default), and the
functions of ART's ``runtime`` and ``logging`` modules: each is ours alike, or it is a listed difference that
README's "Migrating from ART" names. A difference fixed, or a new one, fails the first test.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("agentcore_rl_toolkit")
sys.path.insert(0, str(Path(__file__).parents[1] / "trainer_client"))

import agentcore_rl_toolkit as art  # noqa: E402
import agentcore_rl_toolkit.logging as art_logging  # noqa: E402
import agentcore_rl_toolkit.runtime as art_runtime  # noqa: E402
from trainer_support import BUCKET, EXP_ID, RUNTIME_ARN, aws_env, create_experiment  # noqa: E402, F401

import agent_app  # noqa: E402
import agent_app.logging  # noqa: E402
import agent_app.runtime  # noqa: E402
import trainer_client  # noqa: E402

README = Path(__file__).parents[2] / "README.md"
#: Each difference from ART's surface, and the words the README's "Migrating from ART" lists it with.
DIFFERENCES = {
    "RolloutFuture.s3_client": "no `s3_client`, `agentcore_client` or `agent_runtime_arn` of its own",
    "RolloutFuture.agentcore_client": "no `s3_client`, `agentcore_client` or `agent_runtime_arn` of its own",
    "RolloutFuture.agent_runtime_arn": "no `s3_client`, `agentcore_client` or `agent_runtime_arn` of its own",
    "BatchResult.payloads": "no `payloads` list",
    "AsyncBatchResult.payloads": "no `payloads` list",
    "RolloutFuture()": "constructors are not ART's",
    "BatchResult()": "constructors are not ART's",
    "AsyncBatchResult()": "constructors are not ART's",
    "BatchItem()": "constructors are not ART's",
}
SNAPSHOT: Any = {"invocation_id": "inv-1", "status": "failed", "error": "boom"}


@pytest.fixture
def instances() -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """Each top-level class of ART's as an object made ART's way, and ours made the same way where one can be."""
    create_experiment()
    art_client = art.RolloutClient(RUNTIME_ARN, BUCKET, EXP_ID, base_url="http://model/v1", model_id="m")
    art_http = art.AgentCoreHttpClient(RUNTIME_ARN)
    arts = {
        "AgentCoreRLApp": art.AgentCoreRLApp(),
        "AgentCoreRuntimeApp": art.AgentCoreRuntimeApp(),
        "AgentCoreHttpClient": art_http,
        "InvocationHandle": art.InvocationHandle(art_http, "session-1", "inv-1"),
        "InvocationError": art.InvocationError("session-1", SNAPSHOT),
        "RolloutClient": art_client,
        "RolloutFuture": art.RolloutFuture(art_client.s3_client, BUCKET, "key", session_id="s", input_id="i"),
        "BatchResult": art_client.run_batch([{}], 1),
        "AsyncBatchResult": art_client.run_batch_async([{}], 1),
        "BatchItem": art.BatchItem(True),
    }
    our_http = agent_app.AgentCoreHttpClient(RUNTIME_ARN)
    with trainer_client.RolloutClient(RUNTIME_ARN, BUCKET, EXP_ID, base_url="http://model/v1", model_id="m") as client:
        ours = {
            "AgentCoreRLApp": agent_app.AgentCoreRLApp(),
            "AgentCoreRuntimeApp": agent_app.AgentCoreRuntimeApp(),
            "AgentCoreHttpClient": our_http,
            "InvocationHandle": agent_app.InvocationHandle(our_http, "session-1", "inv-1"),
            "InvocationError": agent_app.InvocationError("session-1", SNAPSHOT),
            "RolloutClient": client,
            "RolloutFuture": client.invoke({}),
            "BatchResult": client.run_batch([{}], 1),
            "AsyncBatchResult": client.run_batch_async([{}], 1),
        }
        yield arts, ours


def _public(thing: Any) -> set[str]:
    names = {name for name in dir(thing) if not name.startswith("_")}
    if dataclasses.is_dataclass(thing):
        names |= {field.name for field in dataclasses.fields(thing)}
    return names


def _function(owner: Any, name: str) -> Any:
    """The function behind ``owner.name`` (a method, a property's getter, a plain function), else ``None``."""
    value = inspect.getattr_static(owner, name, None)
    value = getattr(value, "__func__", getattr(value, "fget", value))
    return value if inspect.isfunction(value) else None


def _parameter_differences(where: str, art_function: Any, our_function: Any) -> Iterator[str]:
    """``where`` if a call written for ART's function would not bind the same way to ours."""
    ours = inspect.signature(our_function).parameters
    our_order = list(ours)
    for position, parameter in enumerate(inspect.signature(art_function).parameters.values()):
        if parameter.kind is parameter.VAR_KEYWORD:
            same = any(p.kind is p.VAR_KEYWORD for p in ours.values())
        elif parameter.kind is parameter.VAR_POSITIONAL:
            same = any(p.kind is p.VAR_POSITIONAL for p in ours.values())
        else:
            mine = ours.get(parameter.name)
            same = (
                mine is not None
                and (parameter.kind is parameter.KEYWORD_ONLY or our_order.index(parameter.name) == position)
                and (parameter.default is parameter.empty or mine.default == parameter.default)
            )
        if not same:
            yield where
            return


def _module_differences(art_module: ModuleType, our_module: ModuleType) -> Iterator[str]:
    names = getattr(art_module, "__all__", None) or [
        name
        for name, value in vars(art_module).items()
        if not name.startswith("_") and getattr(value, "__module__", None) == art_module.__name__
    ]
    for name in names:
        where = f"{art_module.__name__}.{name}"
        if not hasattr(our_module, name):
            yield where
        elif inspect.isfunction(getattr(art_module, name)):
            yield from _parameter_differences(where, getattr(art_module, name), getattr(our_module, name))


def _surface_differences(arts: dict[str, Any], ours: dict[str, Any]) -> Iterator[str]:
    for name in art.__all__:
        art_class = getattr(art, name)
        our_class = getattr(agent_app, name, None) or getattr(trainer_client, name, None)
        if our_class is None:
            yield name
            continue
        art_names = _public(arts.get(name, art_class))
        our_names = _public(ours.get(name, our_class))
        yield from (f"{name}.{attribute}" for attribute in sorted(art_names - our_names))
        for attribute in sorted(art_names & our_names):
            art_function = _function(art_class, attribute)
            if art_function is not None and art_function.__module__.startswith(art.__name__):
                our_function = _function(our_class, attribute)
                if our_function is None:
                    yield f"{name}.{attribute}"
                else:
                    yield from _parameter_differences(f"{name}.{attribute}", art_function, our_function)
        art_init = _function(art_class, "__init__")
        if art_init is not None and art_init.__module__.startswith(art.__name__):
            yield from _parameter_differences(f"{name}()", art_init, _function(our_class, "__init__"))


def test_every_name_of_arts_surface_is_ours_alike_or_a_listed_difference(instances):
    # GIVEN ART's top-level classes and their objects made ART's way, and ours
    arts, ours = instances

    # WHEN each name, attribute and parameter list of ART's is looked up in ours, and ART's runtime and logging
    # modules in ours
    found = set(_surface_differences(arts, ours))
    found |= set(_module_differences(art_runtime, agent_app.runtime))
    found |= set(_module_differences(art_logging, agent_app.logging))

    # THEN what differs is exactly what is listed
    assert found == set(DIFFERENCES)


def test_the_readme_lists_each_difference():
    text = README.read_text()
    section = text[text.index("## Migrating from ART") : text.index("## Training backends")]
    assert [words for words in sorted(set(DIFFERENCES.values())) if words not in " ".join(section.split())] == []
    numbered = re.findall(r"^(\d+)\. \*\*", section, re.MULTILINE)
    assert numbered == [str(n) for n in range(1, len(numbered) + 1)]
