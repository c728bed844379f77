"""`QueueStorage`: the one bucket that holds every queue, its access-log bucket, its key."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Aws, Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct
from s3queue.contract import names

LIFECYCLE_RULES_MAX = 1000
"""S3's limit of lifecycle rules per bucket: two per queue, three for the bucket."""
IDEMPOTENCY_RULE = "expire-idempotency-records"


class QueueStorage(Construct):
    """The queue bucket: private, encrypted, TLS only, access-logged, with TTL lifecycle rules.

    Lifecycle rules expire only what the protocol no longer needs (dedup markers, dead letters
    after their retention, idempotency records): ``msg/``, ``inbox/`` and ``tickets/`` are
    never expired, so no message is lost to a rule.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        prefix: str,
        queues: Sequence[str],
        ids_retention: Duration,
        dlq_retention: Duration,
        idempotency_retention: Duration,
        access_log_retention: Duration,
        use_kms: bool,
        versioned: bool,
        retain: bool,
        bucket_name: str | None,
        event_bridge: bool,
    ) -> None:
        super().__init__(scope, construct_id)
        removal = RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY
        self.key: kms.Key | None = None
        if use_kms:
            self.key = kms.Key(
                self,
                "Key",
                description="S3Queue: encrypts the queue bucket and the alarm topic",
                enable_key_rotation=True,
                removal_policy=removal,
            )
            allow_log_groups(self.key)
        self.access_logs = access_log_bucket(self, retention=access_log_retention, retain=retain)
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            bucket_name=bucket_name,
            encryption=s3.BucketEncryption.KMS if self.key else s3.BucketEncryption.S3_MANAGED,
            encryption_key=self.key,
            # One data key per bucket instead of a KMS call per object: a queue makes many.
            bucket_key_enabled=True if self.key else None,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            minimum_tls_version=1.2,
            versioned=versioned,
            server_access_logs_bucket=self.access_logs,
            server_access_logs_prefix="queue-bucket/",
            lifecycle_rules=lifecycle_rules(
                prefix,
                queues,
                ids=ids_retention,
                dlq=dlq_retention,
                idempotency=idempotency_retention,
                versioned=versioned,
            ),
            removal_policy=removal,
            auto_delete_objects=not retain,
        )
        if event_bridge:
            enable_event_bridge(self.bucket)


def access_log_bucket(scope: Construct, *, retention: Duration, retain: bool) -> s3.Bucket:
    """The destination of the queue bucket's server access logs, expiring them."""
    return s3.Bucket(
        scope,
        "AccessLogs",
        # Server access log delivery supports SSE-S3 only, whatever the queue bucket uses.
        encryption=s3.BucketEncryption.S3_MANAGED,
        block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
        enforce_ssl=True,
        minimum_tls_version=1.2,
        lifecycle_rules=[s3.LifecycleRule(id="expire-logs", expiration=retention)],
        removal_policy=RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY,
        auto_delete_objects=not retain,
    )


def enable_event_bridge(bucket: s3.Bucket) -> None:
    """Send the bucket's events to EventBridge, set on the CloudFormation resource itself.

    ``Bucket(event_bridge_enabled=True)`` would do it through a custom-resource Lambda whose
    role carries an AWS managed policy; the native property needs neither.
    """
    cfn_bucket = bucket.node.default_child
    assert isinstance(cfn_bucket, s3.CfnBucket)
    cfn_bucket.notification_configuration = s3.CfnBucket.NotificationConfigurationProperty(
        event_bridge_configuration=s3.CfnBucket.EventBridgeConfigurationProperty(
            event_bridge_enabled=True
        )
    )


def allow_log_groups(key: kms.Key) -> None:
    """Let CloudWatch Logs encrypt this account's log groups with `key`, and nothing else."""
    log_groups = f"arn:{Aws.PARTITION}:logs:{Aws.REGION}:{Aws.ACCOUNT_ID}:log-group:*"
    key.add_to_resource_policy(
        iam.PolicyStatement(
            principals=[iam.ServicePrincipal(f"logs.{Aws.REGION}.amazonaws.com")],
            actions=["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*"],
            resources=["*"],
            conditions={"ArnLike": {"kms:EncryptionContext:aws:logs:arn": log_groups}},
        )
    )


def lifecycle_rules(
    prefix: str,
    queues: Sequence[str],
    *,
    ids: Duration,
    dlq: Duration,
    idempotency: Duration,
    versioned: bool,
) -> list[s3.LifecycleRule]:
    """Per-queue TTL rules on ``ids/`` and ``dlq/``, one on every queue's idempotency records
    (one rule, not one a queue: S3 allows 1,000 a bucket), plus bucket-wide hygiene."""
    rules = [
        s3.LifecycleRule(
            id="abort-incomplete-multipart-uploads",
            abort_incomplete_multipart_upload_after=Duration.days(1),
        ),
        # Garbage collection only: an expired record is replaced in place whether or not it
        # is still there.
        s3.LifecycleRule(
            id=IDEMPOTENCY_RULE,
            prefix=names.idempotency_root(prefix),
            expiration=idempotency,
        ),
    ]
    if versioned:
        rules.append(
            s3.LifecycleRule(
                id="expire-noncurrent-versions",
                noncurrent_version_expiration=Duration.days(1),
                expired_object_delete_marker=True,
            )
        )
    expirations = {names.IDS: ids, names.DLQ: dlq}
    for queue in queues:
        root = names.queue_root(prefix, queue)
        for segment in names.EXPIRING_SEGMENTS:
            rules.append(
                s3.LifecycleRule(
                    id=f"{queue}-{segment.rstrip('/')}",
                    prefix=root + segment,
                    expiration=expirations[segment],
                )
            )
    return rules
