"""Where the repository's packages land in the wheel (everything else is in pyproject.toml; decision D80).

The product's packages install under their own names. The local twin's (``local_stack``, ``lambdas``,
``examples``) install inside ``agentcore_rollouts_local``, so that no generic name reaches the top of
site-packages while the repository keeps its layout. A source tree without the twin (an agent image's build
context: the contract, ``agent_app`` and the example it runs) builds the product's packages alone.
"""

from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).resolve().parent
TWIN = "agentcore_rollouts_local"
TWIN_TOPS = ("local_stack", "lambdas", "examples") if (HERE / TWIN).is_dir() else ()

setup(
    packages=[
        *find_packages(where=HERE, include=["rollout_contract*", "rollout_budgets*", "agent_app*", "trainer_client*"]),
        *([TWIN] if TWIN_TOPS else []),
        *(f"{TWIN}.{name}" for name in find_packages(where=HERE, include=[f"{top}*" for top in TWIN_TOPS])),
    ],
    package_dir={f"{TWIN}.{top}": top for top in TWIN_TOPS},
)
