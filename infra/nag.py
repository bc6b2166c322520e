"""cdk-nag 3.x wiring: the AwsSolutions pack on every synth, and justified acknowledgements.

Finding ids quote resources the way cdk-nag prints them: pseudo parameters as ``<AWS::Region>`` in an
environment-agnostic stack, literal values in an environment-bound one (what ``cdk deploy`` synthesizes
with credentials). :func:`nag_arn` and :func:`nag_value` build them for either, from the stack itself.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, App, Aws, CfnElement, Stack, Validations
from cdk_nag import AwsSolutionsChecks
from constructs import IConstruct

_PSEUDO_PARAMETERS = {
    Aws.ACCOUNT_ID: "<AWS::AccountId>",
    Aws.REGION: "<AWS::Region>",
    Aws.PARTITION: "<AWS::Partition>",
}


def add_nag_checks(app: App) -> None:
    """Run cdk-nag's AwsSolutions pack on every synth; an unacknowledged finding fails the synth."""
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))


def acknowledge(scope: IConstruct, finding: str, reason: str) -> None:
    """Accept one cdk-nag finding (``RuleId`` or ``RuleId[FindingId]``) on ``scope`` and its children."""
    Validations.of(scope).acknowledge(Acknowledgment(id=finding, reason=reason))


def nag_value(value: str) -> str:
    """How cdk-nag prints ``value`` in a finding id: pseudo parameters as ``<AWS::Name>``, literals as they are."""
    return _PSEUDO_PARAMETERS.get(value, value)


def nag_logical_id(construct: IConstruct) -> str:
    """The logical id of ``construct``'s CloudFormation resource (its default child), as finding ids name it.

    Raises:
        TypeError: ``construct`` has no CloudFormation resource as its default child.
    """
    resource = construct.node.default_child
    if not isinstance(resource, CfnElement):
        raise TypeError(f"{construct.node.path} has no CloudFormation resource as its default child")
    return Stack.of(construct).get_logical_id(resource)


def nag_arn(scope: IConstruct, service: str, resource: str) -> str:
    """An ARN in ``scope``'s stack as cdk-nag prints it (``arn:<AWS::Partition>:service:region:account:resource``)."""
    stack = Stack.of(scope)
    return f"arn:{nag_value(stack.partition)}:{service}:{nag_value(stack.region)}:{nag_value(stack.account)}:{resource}"
