"""The optional ML environment holds the real frameworks the backend adapters are tested against."""

import pytest

torch = pytest.importorskip("torch")


def test_torch_is_the_cpu_build():
    assert not torch.cuda.is_available()
    assert torch.__version__.startswith("2.13.0")


def test_real_framework_types_import():
    from agentcore_rl_toolkit import RolloutClient  # noqa: F401
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput

    assert "response_mask" in AgentLoopOutput.model_fields
    assert callable(AgentLoopBase.run)
