"""The public surface of ``agent_app``: exports, decorator, logging and ``run()``."""

from __future__ import annotations

import logging

import pytest

import agent_app
from agent_app import AgentCoreRLApp, RewardFunction


def test_package_exports_only_the_art_names():
    art_names = ["AgentCoreHttpClient", "AgentCoreRLApp", "AgentCoreRuntimeApp", "InvocationError", "InvocationHandle"]
    assert sorted(agent_app.__all__) == [*art_names, "RewardFunction", "openai_sampling_kwargs"]
    assert all(getattr(agent_app, name) is not None for name in agent_app.__all__)


def test_rollout_entrypoint_returns_the_function_unchanged():
    # GIVEN a plain function
    def solve(payload):
        return {"rewards": 1.0}

    # WHEN it is decorated
    decorated = AgentCoreRLApp().rollout_entrypoint(solve)

    # THEN it is the same object, still callable directly, with nothing added
    assert decorated is solve
    assert decorated({}) == {"rewards": 1.0}
    assert not hasattr(decorated, "run")


def test_constructing_the_app_leaves_configured_logging_alone():
    # GIVEN the root logger's current configuration (pytest's handlers)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level

    # WHEN apps are constructed
    AgentCoreRLApp()
    AgentCoreRLApp(debug=True)

    # THEN its handlers and level are unchanged
    assert root.handlers == handlers
    assert root.level == level


def test_run_rejects_a_port_variable_that_is_not_a_port(monkeypatch):
    # GIVEN PORT set to something that is not a port number
    monkeypatch.setenv("PORT", "eighty")

    # WHEN the app is run
    # THEN it fails before serving, naming the variable and what to set
    with pytest.raises(ValueError, match="PORT='eighty' is not a port number"):
        AgentCoreRLApp().run()


def test_reward_function_requires_call():
    # GIVEN a subclass that does not implement __call__
    class Incomplete(RewardFunction):
        pass

    class Constant(RewardFunction):
        def __call__(self, **kwargs):
            return 0.5

    # WHEN they are instantiated
    # THEN the incomplete one is refused and the complete one scores
    with pytest.raises(TypeError, match="abstract"):
        Incomplete()
    assert Constant()(response="x", ground_truth="y") == 0.5
