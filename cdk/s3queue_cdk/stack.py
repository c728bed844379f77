"""`S3QueueStack`: the whole queue system; it only composes the constructs and grants."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_cdk import Aws, CfnOutput, Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from constructs import Construct
from s3queue.config import ConfigError
from s3queue.discovery import discover_handlers

from s3queue_cdk import permissions
from s3queue_cdk.coordinator import Coordinator
from s3queue_cdk.layers import Layers
from s3queue_cdk.monitoring import Monitoring
from s3queue_cdk.settings import DeploymentSettings
from s3queue_cdk.storage import QueueStorage
from s3queue_cdk.workers import Workers

REPO_ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS_DIR = REPO_ROOT / "functions"
LAYER_DIR = REPO_ROOT / "layers" / "s3queue"


class S3QueueStack(Stack):
    """One bucket, the s3queue layer, a coordinator, one worker per handler module, alarms.

    ``functions_dir`` holds ``coordinator/``, ``worker/`` and ``handlers/``; every module in
    ``handlers/`` becomes a queue.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: DeploymentSettings,
        functions_dir: Path = FUNCTIONS_DIR,
        layer_dir: Path = LAYER_DIR,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.settings = settings
        self.handlers = discover_handlers(functions_dir / "handlers")
        if not self.handlers:
            raise ConfigError(
                f"no handler modules in {functions_dir / 'handlers'}: add one "
                "(see functions/handlers/README.md)"
            )
        self.storage = self._storage()
        layers = Layers(
            self,
            "Layers",
            layer_dir=layer_dir,
            powertools_version=settings.powertools_layer_version,
        )
        self.workers, self.coordinator = self._functions(functions_dir, layers)
        self._grant()
        self.monitoring = Monitoring(
            self,
            "Monitoring",
            workers={queue: w.function for queue, w in self.workers.by_queue.items()},
            coordinator=self.coordinator.function,
            alarm_email=settings.alarm_email,
            oldest_message_alarm=Duration.seconds(settings.oldest_message_alarm_seconds),
            encryption_key=self.storage.key,
        )
        CfnOutput(self, "BucketName", value=self.storage.bucket.bucket_name)
        CfnOutput(self, "AlarmTopicArn", value=self.monitoring.topic.topic_arn)
        CfnOutput(self, "DashboardName", value=self.monitoring.dashboard.dashboard.dashboard_name)

    def grant_enqueue(self, grantee: iam.IGrantable, queue: str) -> iam.Grant:
        """Let another service enqueue to `queue` by plain S3 PUT into its ``inbox/`` only."""
        if queue not in self.handlers:
            raise ConfigError(f"unknown queue {queue!r}; queues: {sorted(self.handlers)}")
        return permissions.grant_enqueue(
            grantee,
            bucket=self.storage.bucket,
            prefix=self.settings.prefix,
            queue=queue,
            key=self.storage.key,
        )

    def _storage(self) -> QueueStorage:
        settings = self.settings
        return QueueStorage(
            self,
            "Storage",
            prefix=settings.prefix,
            queues=list(self.handlers),
            done_retention=Duration.days(settings.done_retention_days),
            ids_retention=Duration.days(settings.ids_retention_days),
            dlq_retention=Duration.days(settings.dlq_retention_days),
            access_log_retention=Duration.days(settings.access_log_retention_days),
            use_kms=settings.kms,
            versioned=settings.versioned,
            retain=settings.retain_data,
            bucket_name=_bucket_name(settings.bucket_name_prefix),
            event_bridge=settings.low_latency,
        )

    def _functions(self, functions_dir: Path, layers: Layers) -> tuple[Workers, Coordinator]:
        settings, bucket = self.settings, self.storage.bucket
        removal = RemovalPolicy.RETAIN if settings.retain_data else RemovalPolicy.DESTROY
        workers = Workers(
            self,
            "Workers",
            handlers=self.handlers,
            functions_dir=functions_dir,
            layers=layers.all,
            bucket=bucket,
            prefix=settings.prefix,
            reserve_concurrency=settings.reserve_concurrency,
            removal_policy=removal,
        )
        coordinator = Coordinator(
            self,
            "Coordinator",
            code_dir=functions_dir / "coordinator",
            layers=layers.all,
            bucket=bucket,
            prefix=settings.prefix,
            workers=workers.by_queue,
            schedule=settings.schedule,
            low_latency=settings.low_latency,
            reserve_concurrency=settings.reserve_concurrency,
            removal_policy=removal,
        )
        return workers, coordinator

    def _grant(self) -> None:
        """Each worker its own queue; the coordinator every queue and every worker."""
        bucket, prefix, key = self.storage.bucket, self.settings.prefix, self.storage.key
        for queue, worker in self.workers.by_queue.items():
            permissions.grant_queue_access(
                worker.function, bucket=bucket, prefix=prefix, queues=[queue], key=key
            )
        coordinator = self.coordinator.function
        permissions.grant_queue_access(
            coordinator, bucket=bucket, prefix=prefix, queues=list(self.handlers), key=key
        )
        permissions.grant_invoke(
            coordinator, [worker.function for worker in self.workers.by_queue.values()]
        )


def _bucket_name(prefix: str) -> str | None:
    """``<prefix>-<account>-<region>``, unique per account and region; None to auto-name."""
    return f"{prefix}-{Aws.ACCOUNT_ID}-{Aws.REGION}" if prefix else None
