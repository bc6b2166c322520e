"""The regions an experiment can be deployed to: the committed list is cfn-lint's, and the README names them."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from infra.regions import OTHER_PARTITION_RUNTIME_REGIONS, RUNTIME_REGIONS, RUNTIME_RESOURCE_TYPE

README = Path(__file__).resolve().parents[2] / "README.md"


def _cfn_lint_regions() -> set[str]:
    """Regions whose cfn-lint provider schema list holds the AgentCore Runtime resource."""
    providers = resources.files("cfnlint") / "data" / "schemas" / "providers"
    found = set()
    for schema in providers.iterdir():
        if schema.name.endswith(".json") and schema.name != "sam.json":
            if RUNTIME_RESOURCE_TYPE in json.loads(schema.read_text()):
                found.add(schema.name.removesuffix(".json"))
    return found


def test_the_committed_regions_are_the_ones_cfn_lint_knows() -> None:
    # GIVEN the installed cfn-lint's region schemas WHEN the regions with the runtime are listed THEN they match
    assert set(RUNTIME_REGIONS) | set(OTHER_PARTITION_RUNTIME_REGIONS) == _cfn_lint_regions()
    assert not set(RUNTIME_REGIONS) & set(OTHER_PARTITION_RUNTIME_REGIONS)


def test_the_readme_lists_every_supported_region() -> None:
    text = README.read_text()
    assert all(f"`{region}`" in text for region in RUNTIME_REGIONS)
