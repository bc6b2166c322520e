"""No product package imports the local twin: what a trainer, an agent or a function installs stands alone (D80, D94).

A static check (no build, so it runs in ``make check``): every module of the product's packages, parsed, imports
nothing from the twin's packages (``lambdas``, ``local_stack``, ``examples``) or its home
(``agentcore_rollouts_local``), which a product-only install does not have.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("rollout_contract", "rollout_budgets", "agent_app", "trainer_client")
TWIN = frozenset({"lambdas", "local_stack", "examples", "agentcore_rollouts_local"})


def twin_imports(path: Path) -> list[str]:
    """The imports of ``path`` that name a twin package (``module: line``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [f"{name}: {node.lineno}" for name in names if name.split(".")[0] in TWIN]
    return found


def test_no_product_module_imports_the_twin() -> None:
    # GIVEN every module of the product's packages
    modules = [path for package in PRODUCT for path in sorted((ROOT / package).rglob("*.py"))]
    assert len(modules) > 50
    # THEN none imports a package of the twin
    offending = {str(path.relative_to(ROOT)): found for path in modules if (found := twin_imports(path))}
    assert offending == {}
