"""Which rLLM the tests import (not an rLLM module): this stand-in, or the real tree ``AGENTCORE_STAND_INS_RLLM`` names.

The tests put :func:`rllm_paths` at the front of ``sys.path`` (and of their workers' ``PYTHONPATH``) before
importing ``rllm``. This directory stays on the path either way: it serves ``rllm_engine``.
"""

import os
from pathlib import Path

#: A directory holding a real rLLM tree (``git archive`` of rllm-org/rllm), to run the tests against it.
ENV = "AGENTCORE_STAND_INS_RLLM"
STAND_IN = Path(__file__).parent
REAL = os.environ.get(ENV) or None


def rllm_paths():
    """``sys.path`` entries, first first: the real tree (when named) and this stand-in's directory."""
    if REAL is None:
        return [str(STAND_IN)]
    if not (Path(REAL) / "rllm" / "__init__.py").is_file():
        raise RuntimeError(
            f"{ENV}={REAL!r} holds no rLLM tree (no rllm/__init__.py); see tests/stand_ins/rllm/README.md"
        )
    return [REAL, str(STAND_IN)]
