"""`S3QueueStack`: the whole queue system; it only composes the constructs and grants."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_cdk import Aws, CfnOutput, Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Construct
from s3queue.contract import names, tracing
from s3queue.contract.discovery import HandlerSpec, discover_handlers
from s3queue.errors import ConfigError

from s3queue_cdk import alarms, permissions
from s3queue_cdk.coordinator import Coordinator
from s3queue_cdk.layers import Layers
from s3queue_cdk.monitoring import Monitoring
from s3queue_cdk.queues import QueueGroup, enqueue_policy_name, groups_of
from s3queue_cdk.schedules import check_schedules
from s3queue_cdk.settings import DeploymentSettings
from s3queue_cdk.storage import QueueStorage
from s3queue_cdk.workers import Worker, deployed_settings

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGED_FUNCTIONS = Path(__file__).resolve().parent / "entrypoints"
"""The entry points (``coordinator/``, ``worker/``) as the ``s3queue[cdk]`` wheel ships them."""
FUNCTIONS_DIR = PACKAGED_FUNCTIONS if PACKAGED_FUNCTIONS.is_dir() else REPO_ROOT / "functions"
"""``coordinator/`` and ``worker/``: the installed package's, else this checkout's."""
LAYER_DIR = REPO_ROOT / "layers" / "s3queue"
"""This checkout's layer; an installed package is bundled into a layer instead."""
MAX_QUEUES = 150
"""The stack's ceiling: the first limit reached is the parent template's 200 outputs (one
enqueue policy a queue); the tests synthesize it and check every other limit."""


class S3QueueStack(Stack):
    """One bucket, the s3queue layer, a coordinator, one worker per handler module, alarms.

    Every module in `handlers_dir` becomes a queue (default: ``functions/handlers``); its
    ``requirements.txt``, if any, is installed into the workers' code for Lambda.
    ``functions_dir`` holds the entry points ``coordinator/`` and ``worker/`` (default: the
    package's own). Without `settings`, the defaults with `construct_id` as the stack name.
    The queues' own resources live in nested stacks.

    From another CDK app (``pip install 's3queue[cdk]'``)::

        S3QueueStack(app, "Jobs", handlers_dir=Path("jobs"))
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: DeploymentSettings | None = None,
        handlers_dir: Path | None = None,
        functions_dir: Path = FUNCTIONS_DIR,
        layer_dir: Path | None = LAYER_DIR,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.settings = settings = settings or DeploymentSettings(stack_name=construct_id)
        self.handlers_dir = Path(handlers_dir or functions_dir / "handlers")
        self.handlers = _handlers(self.handlers_dir)
        check_schedules(self.handlers, settings.schedule_seconds, settings.ids_retention_days)
        self.storage = self._storage()
        self.layers = Layers(
            self,
            "Layers",
            layer_dir=layer_dir if layer_dir is not None and layer_dir.is_dir() else None,
            powertools_version=settings.powertools_layer_version,
            powertools_arn=settings.powertools_layer_arn,
        )
        self.monitoring = Monitoring(
            self,
            "Monitoring",
            stack_name=settings.stack_name,
            alarm_email=settings.alarm_email,
            encryption_key=self.storage.key,
        )
        self.groups = self._groups(functions_dir)
        self.workers: dict[str, Worker] = {
            queue: worker for group in self.groups for queue, worker in group.workers.items()
        }
        self.coordinator = self._coordinator(functions_dir)
        self.monitoring.watch_coordinator(
            self.coordinator.function.function_name, settings.schedule_seconds
        )
        self.monitoring.add_dashboard(
            {q: w.function_name for q, w in self.workers.items()},
            self.coordinator.function.function_name,
            [
                n
                for q in sorted(self.handlers)
                for n in alarms.queue_alarm_names(self.settings.stack_name, q)
            ],
        )
        if settings.trace_calls:
            self._trace_calls()
        self._outputs()

    def grant_enqueue(self, grantee: iam.IGrantable, queue: str) -> None:
        """Let another service, of this account or another, enqueue to `queue` by plain PUT.

        Same account: an identity policy on `grantee`. Another account: a bucket-policy (and
        key-policy) statement naming it; its account must allow it too (deployment.md).
        """
        if queue not in self.handlers:
            raise ConfigError(f"unknown queue {queue!r}; queues: {sorted(self.handlers)}")
        permissions.grant_enqueue(
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
            ids_retention=Duration.days(settings.ids_retention_days),
            dlq_retention=Duration.days(settings.dlq_retention_days),
            idempotency_retention=Duration.days(settings.idempotency_retention_days),
            access_log_retention=Duration.days(settings.access_log_retention_days),
            use_kms=settings.kms,
            versioned=settings.versioned,
            retain=settings.retain_data,
            bucket_name=_bucket_name(settings.bucket_name_prefix),
            event_bridge=settings.low_latency,
        )

    @property
    def _removal(self) -> RemovalPolicy:
        return RemovalPolicy.RETAIN if self.settings.retain_data else RemovalPolicy.DESTROY

    def _groups(self, functions_dir: Path) -> list[QueueGroup]:
        settings = self.settings
        return [
            QueueGroup(
                self,
                f"Queues{index}",
                stack_name=settings.stack_name,
                specs=specs,
                entry_dir=functions_dir / "worker",
                handlers_dir=self.handlers_dir,
                layer=self.layers.s3queue,
                powertools_arn=self.layers.powertools_arn,
                bucket=self.storage.bucket,
                prefix=settings.prefix,
                key=self.storage.key,
                topic=self.monitoring.topic,
                oldest_message_alarm=Duration.seconds(settings.oldest_message_alarm_seconds),
                reserve_concurrency=settings.reserve_concurrency,
                removal_policy=self._removal,
            )
            for index, specs in groups_of(self.handlers).items()
        ]

    def _coordinator(self, functions_dir: Path) -> Coordinator:
        settings = self.settings
        coordinator = Coordinator(
            self,
            "Coordinator",
            code_dir=functions_dir / "coordinator",
            layers=self.layers.all,
            bucket=self.storage.bucket,
            prefix=settings.prefix,
            workers={
                queue: (
                    names.worker_function_name(settings.stack_name, queue),
                    deployed_settings(spec.settings, settings.reserve_concurrency),
                )
                for queue, spec in self.handlers.items()
            },
            schedule=settings.schedule,
            low_latency=settings.low_latency,
            reserve_concurrency=settings.reserve_concurrency,
            removal_policy=self._removal,
            encryption_key=self.storage.key,
            memory=settings.coordinator_memory,
        )
        bucket, key = self.storage.bucket, self.storage.key
        function = coordinator.function
        permissions.grant_stack_access(function, bucket=bucket, prefix=settings.prefix, key=key)
        permissions.grant_invoke_workers(function, settings.stack_name)
        for group in self.groups:
            # Its first run should find the workers it invokes.
            coordinator.node.add_dependency(group)
        return coordinator

    def _trace_calls(self) -> None:
        """Every function traces its handler and S3 calls with the X-Ray SDK (tracing.py)."""
        for construct in self.node.find_all():
            if isinstance(construct, lambda_.Function):
                construct.add_environment(tracing.ENV_TRACE_CALLS, "1")

    def _outputs(self) -> None:
        storage, name = self.storage, self.settings.stack_name
        CfnOutput(self, "BucketName", value=storage.bucket.bucket_name)
        CfnOutput(self, "BucketArn", value=storage.bucket.bucket_arn)
        if storage.key is not None:
            CfnOutput(self, "KeyArn", value=storage.key.key_arn)
        CfnOutput(self, "Prefix", value=self.settings.prefix)
        CfnOutput(self, "AlarmTopicArn", value=self.monitoring.topic.topic_arn)
        CfnOutput(self, "DashboardName", value=self.monitoring.dashboard.dashboard.dashboard_name)
        CfnOutput(self, "CoordinatorFunctionName", value=self.coordinator.function.function_name)
        CfnOutput(
            self,
            "WorkerFunctionNames",
            value=f"{names.worker_function_prefix(name)}<queue> (cut and hashed past 64 chars)",
        )
        for index, queue in enumerate(sorted(self.handlers)):
            CfnOutput(
                self,
                f"EnqueuePolicy{index}",
                description=f"Attach to a role of this account to enqueue to {queue}",
                value=f"arn:{Aws.PARTITION}:iam::{Aws.ACCOUNT_ID}:policy/"
                + enqueue_policy_name(name, queue),
            )


def _handlers(directory: Path) -> dict[str, HandlerSpec]:
    handlers = discover_handlers(directory)
    if not handlers:
        raise ConfigError(
            f"no handler modules in {directory}: add one (see functions/handlers/README.md)"
        )
    if len(handlers) > MAX_QUEUES:
        raise ConfigError(
            f"{len(handlers)} handler modules in {directory}: one stack holds at most "
            f"{MAX_QUEUES} queues; deploy the rest as a second stack (another stackName)"
        )
    return handlers


def _bucket_name(prefix: str) -> str | None:
    """``<prefix>-<account>-<region>``, unique per account and region; None to auto-name."""
    return f"{prefix}-{Aws.ACCOUNT_ID}-{Aws.REGION}" if prefix else None
