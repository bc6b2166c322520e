"""Where an experiment can be deployed: the regions whose CloudFormation has ``AWS::BedrockAgentCore::Runtime``.

Taken from cfn-lint's region schemas (1.58); ``tests/infra/test_regions.py`` derives the list from the installed
cfn-lint again and fails when AWS adds or removes a region, and checks that the README names the same ones.
"""

from __future__ import annotations

RUNTIME_RESOURCE_TYPE = "AWS::BedrockAgentCore::Runtime"

#: Commercial regions with the runtime resource, the ones the README lists.
RUNTIME_REGIONS: tuple[str, ...] = (
    "ap-northeast-1",
    "ap-northeast-2",
    "ap-south-1",
    "ap-south-2",
    "ap-southeast-1",
    "ap-southeast-2",
    "ap-southeast-5",
    "ap-southeast-7",
    "ca-central-1",
    "eu-central-1",
    "eu-north-1",
    "eu-south-1",
    "eu-south-2",
    "eu-west-1",
    "eu-west-2",
    "eu-west-3",
    "sa-east-1",
    "us-east-1",
    "us-east-2",
    "us-west-1",
    "us-west-2",
)
#: The other partitions' regions with it (China, GovCloud, the isolated and sovereign partitions).
OTHER_PARTITION_RUNTIME_REGIONS: tuple[str, ...] = (
    "cn-north-1",
    "cn-northwest-1",
    "eu-isoe-west-1",
    "eusc-de-east-1",
    "us-gov-west-1",
    "us-iso-east-1",
    "us-iso-west-1",
    "us-isob-east-1",
    "us-isob-west-1",
    "us-isof-east-1",
    "us-isof-south-1",
)


def supports_runtime(region: str) -> bool:
    """Whether CloudFormation in ``region`` has the AgentCore Runtime resource."""
    return region in RUNTIME_REGIONS or region in OTHER_PARTITION_RUNTIME_REGIONS
