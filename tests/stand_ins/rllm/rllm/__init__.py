"""Stand-in for rLLM (not on PyPI); see tests/stand_ins/rllm/README.md."""
