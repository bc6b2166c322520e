"""``python -m examples.grpo_local [--steps N]``: see :mod:`examples.grpo_local.train`."""

import sys

from examples.grpo_local.train import main

sys.exit(main())
