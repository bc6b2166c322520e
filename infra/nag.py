"""cdk-nag 3.x wiring: the AwsSolutions pack on every synth, and justified acknowledgements."""

from __future__ import annotations

from aws_cdk import Acknowledgment, App, Validations
from cdk_nag import AwsSolutionsChecks
from constructs import IConstruct


def add_nag_checks(app: App) -> None:
    """Run cdk-nag's AwsSolutions pack on every synth; an unacknowledged finding fails the synth."""
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))


def acknowledge(scope: IConstruct, finding: str, reason: str) -> None:
    """Accept one cdk-nag finding (``RuleId`` or ``RuleId[FindingId]``) on ``scope`` and its children."""
    Validations.of(scope).acknowledge(Acknowledgment(id=finding, reason=reason))
