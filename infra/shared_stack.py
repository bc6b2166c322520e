"""The shared stack, deployed once per account and region: agent images, results, the budget table."""

from __future__ import annotations

from aws_cdk import CfnOutput, Duration, Environment, RemovalPolicy, Stack
from aws_cdk import aws_ecr as ecr
from constructs import Construct

from infra.results_bucket import ResultsBucket
from infra.settings import MUTABLE_IMAGE_TAGS
from infra.tables import contract_table
from rollout_contract.resources import AGENT_REPOSITORY_NAME, BUDGET_TABLE, results_bucket_name

KEEP_TAGGED_IMAGES = 100
UNTAGGED_IMAGE_DAYS = 7


class SharedStack(Stack):
    """ECR repository for agent images, results bucket and the account-wide budget table.

    Every resource has a fixed name from ``rollout_contract.resources`` and is retained on delete;
    experiment stacks find them by name, so no CloudFormation export ties an experiment to this stack.
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, env: Environment | None = None, description: str | None = None
    ) -> None:
        super().__init__(scope, construct_id, env=env, description=description)
        self.repository = ecr.Repository(
            self,
            "AgentRepository",
            repository_name=AGENT_REPOSITORY_NAME,
            image_scan_on_push=True,
            image_tag_mutability=ecr.TagMutability.IMMUTABLE_WITH_EXCLUSION,
            image_tag_mutability_exclusion_filters=[
                ecr.ImageTagMutabilityExclusionFilter.wildcard(tag) for tag in MUTABLE_IMAGE_TAGS
            ],
            lifecycle_rules=[
                ecr.LifecycleRule(
                    description="Drop untagged images (superseded builds)",
                    rule_priority=1,
                    tag_status=ecr.TagStatus.UNTAGGED,
                    max_image_age=Duration.days(UNTAGGED_IMAGE_DAYS),
                ),
                ecr.LifecycleRule(
                    description="Keep the newest tagged images",
                    rule_priority=2,
                    tag_status=ecr.TagStatus.ANY,
                    max_image_count=KEEP_TAGGED_IMAGES,
                ),
            ],
            removal_policy=RemovalPolicy.RETAIN,
        )
        self.results = ResultsBucket(self, "Results", bucket_name=results_bucket_name(self.account, self.region))
        self.budget_table = contract_table(self, "BudgetTable", spec=BUDGET_TABLE, removal_policy=RemovalPolicy.RETAIN)
        CfnOutput(self, "AgentRepositoryUri", value=self.repository.repository_uri)
        CfnOutput(self, "ResultsBucketName", value=self.results.bucket.bucket_name)
        CfnOutput(self, "BudgetTableName", value=self.budget_table.table_name)
