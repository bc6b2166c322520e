"""What ``AgentCoreRLApp`` relies on in ``bedrock-agentcore``, private methods included, checked by signature.

``agent_app`` subclasses ``BedrockAgentCoreApp`` and calls some of its private methods. pyproject pins a
range of bedrock-agentcore known to work; if a release inside it (or an unpinned environment) changes any of
these, this file fails first and names what moved, instead of rollouts failing at run time.
"""

from __future__ import annotations

import inspect
import warnings
from importlib import metadata

import pytest
from packaging.requirements import Requirement
from pydantic.warnings import PydanticDeprecatedSince20

from agent_app import AgentCoreRLApp

with warnings.catch_warnings():
    warnings.simplefilter("ignore", PydanticDeprecatedSince20)
    from bedrock_agentcore.runtime import BedrockAgentCoreApp
    from bedrock_agentcore.runtime.context import BedrockAgentCoreContext, RequestContext

# name -> the parameter names (after self/cls) agent_app calls it with.
APP_METHODS = {
    "_invoke_handler": ["handler", "request_context", "takes_context", "payload"],
    "_takes_context": ["handler"],
    "_ensure_worker_loop": [],
    "add_async_task": ["name", "metadata"],
    "complete_async_task": ["task_id"],
    "run": ["port", "host", "kwargs"],
}
CONTEXT_METHODS = {"set_request_context": ["request_id", "session_id"], "get_request_id": []}


def _parameters(function) -> list[str]:
    return [name for name in inspect.signature(function).parameters if name not in ("self", "cls")]


def test_the_installed_bedrock_agentcore_is_inside_the_pinned_range():
    requirements = [Requirement(text) for text in metadata.requires("agentcore-rollouts") or []]
    requirement = next(r for r in requirements if r.name == "bedrock-agentcore")
    installed = metadata.version("bedrock-agentcore")
    assert requirement.specifier, "pin bedrock-agentcore to a range: agent_app calls its private methods"
    assert requirement.specifier.contains(installed), f"bedrock-agentcore {installed} is outside {requirement}"


@pytest.mark.parametrize(("name", "parameters"), sorted(APP_METHODS.items()))
def test_app_methods_agent_app_calls_keep_their_signatures(name, parameters):
    method = getattr(BedrockAgentCoreApp, name, None)
    assert method is not None, f"BedrockAgentCoreApp.{name} is gone; agent_app/_app.py calls it"
    assert _parameters(method) == parameters, f"BedrockAgentCoreApp.{name} changed: {inspect.signature(method)}"


def test_invoke_handler_is_a_coroutine_and_worker_loop_a_loop():
    assert inspect.iscoroutinefunction(BedrockAgentCoreApp._invoke_handler)
    app = BedrockAgentCoreApp()
    assert hasattr(app._ensure_worker_loop(), "call_soon_threadsafe")
    assert isinstance(app.handlers, dict)


@pytest.mark.parametrize(("name", "parameters"), sorted(CONTEXT_METHODS.items()))
def test_request_context_helpers_keep_their_signatures(name, parameters):
    assert _parameters(getattr(BedrockAgentCoreContext, name)) == parameters
    assert "session_id" in RequestContext.model_fields


def test_agent_app_state_does_not_shadow_the_parents_attributes():
    # Names our __init__ adds must not be names BedrockAgentCoreApp already uses for its own state.
    parent_names = set(vars(BedrockAgentCoreApp())) | set(dir(BedrockAgentCoreApp))
    ours = set(vars(AgentCoreRLApp())) - set(vars(BedrockAgentCoreApp()))
    assert not ours & parent_names
    overridden = {name for name in vars(AgentCoreRLApp) if not name.startswith("__")} & set(dir(BedrockAgentCoreApp))
    assert overridden == {"run"}, f"AgentCoreRLApp overrides more of BedrockAgentCoreApp than run(): {overridden}"
