"""The experiment's secrets (D100): created at deploy time with random values, each read by the roles that need it."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from infra.nag import acknowledge
from rollout_contract.credentials import ExperimentSecret

#: The one action a reader of a secret needs (``grant_read`` would add DescribeSecret, which nothing calls).
READ_SECRET = "secretsmanager:GetSecretValue"


class ExperimentSecrets(Construct):
    """One Secrets Manager secret per :class:`ExperimentSecret`, named by the contract, 64 random characters each.

    Rotating one needs no redeploy: ``aws secretsmanager put-secret-value`` (or a rotation function) changes it,
    and its readers read it again (the token gateway on a refused credential and on an interval).
    """

    def __init__(self, scope: Construct, construct_id: str, *, exp_id: str) -> None:
        super().__init__(scope, construct_id)
        self.secrets = {
            secret: secretsmanager.Secret(
                self,
                "".join(part.capitalize() for part in secret.value.split("-")),
                secret_name=secret.secret_name(exp_id),
                description=f"{exp_id}: {secret.name.lower().replace('_', ' ')} of the rollouts (D100)",
                generate_secret_string=secretsmanager.SecretStringGenerator(
                    exclude_punctuation=True, password_length=64
                ),
                removal_policy=RemovalPolicy.DESTROY,
            )
            for secret in ExperimentSecret
        }
        acknowledge(
            self,
            "AwsSolutions-SMG4",
            "Rotated by whoever runs the experiment (put-secret-value): the readers read a secret again on a refused "
            "credential and on an interval, so no rotation Lambda or redeploy is needed",
        )

    def grant_read(self, principal: iam.IGrantable | iam.Policy, *secrets: ExperimentSecret) -> None:
        """Let ``principal`` (a role, or a policy to add to) read ``secrets``, and nothing else of these."""
        statement = iam.PolicyStatement(
            actions=[READ_SECRET], resources=[self.secrets[secret].secret_arn for secret in secrets]
        )
        if isinstance(principal, iam.Policy):
            principal.add_statements(statement)
        else:
            principal.grant_principal.add_to_principal_policy(statement)
