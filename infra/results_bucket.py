"""The shared results bucket: SSE, TLS only, no public access, native EventBridge notifications."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.nag import acknowledge
from rollout_contract.keys import PAYLOAD_REF_PREFIX

#: How long non-current object versions (overwritten or deleted results) are kept.
NONCURRENT_VERSION_DAYS = 30
#: How long parked oversized payloads are kept (they are read once, at dispatch).
PAYLOAD_REF_DAYS = 14
ACCESS_LOG_DAYS = 90
SERVER_ACCESS_LOGS_USE_BUCKET_POLICY = "@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy"


class ResultsBucket(Construct):
    """The bucket every experiment writes results to, plus the bucket holding its access logs.

    Versioned, encrypted with S3-managed keys (SSE-S3, so EventBridge, the runtime and trainers need no
    KMS grants), retained when the stack is deleted. Events go to EventBridge natively (the L1
    ``NotificationConfiguration.EventBridgeConfiguration.EventBridgeEnabled`` property), so no
    custom-resource Lambda is deployed.
    """

    def __init__(self, scope: Construct, construct_id: str, *, bucket_name: str) -> None:
        super().__init__(scope, construct_id)
        # Deliver access logs under a bucket policy (the ACL way is deprecated); set before any child exists.
        self.node.set_context(SERVER_ACCESS_LOGS_USE_BUCKET_POLICY, True)
        self.access_logs = s3.Bucket(
            self,
            "AccessLogs",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            lifecycle_rules=[s3.LifecycleRule(id="expire-access-logs", expiration=Duration.days(ACCESS_LOG_DAYS))],
            removal_policy=RemovalPolicy.RETAIN,
        )
        acknowledge(
            self.access_logs,
            "AwsSolutions-S1",
            "This bucket is the access-log target of the results bucket; logging it too would loop.",
        )
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            bucket_name=bucket_name,
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            versioned=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            server_access_logs_bucket=self.access_logs,
            server_access_logs_prefix="results/",
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="abort-incomplete-uploads", abort_incomplete_multipart_upload_after=Duration.days(1)
                ),
                s3.LifecycleRule(
                    id="expire-old-versions", noncurrent_version_expiration=Duration.days(NONCURRENT_VERSION_DAYS)
                ),
                s3.LifecycleRule(
                    id="expire-parked-payloads",
                    prefix=f"{PAYLOAD_REF_PREFIX}/",
                    expiration=Duration.days(PAYLOAD_REF_DAYS),
                ),
            ],
            removal_policy=RemovalPolicy.RETAIN,
        )
        cfn_bucket = self.bucket.node.default_child
        assert isinstance(cfn_bucket, s3.CfnBucket)
        cfn_bucket.add_property_override("NotificationConfiguration.EventBridgeConfiguration.EventBridgeEnabled", True)
