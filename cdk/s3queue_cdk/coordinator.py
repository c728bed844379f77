"""`Coordinator`: the scheduled Lambda that turns pending messages into tickets for workers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from constructs import Construct
from s3queue.contract.environment import ENV_BUCKET, ENV_PREFIX, ENV_QUEUES, QueueMap
from s3queue.contract.settings import QueueSettings

from s3queue_cdk.functions import QueueFunction

HANDLER = "app.handler"
TIMEOUT = Duration.seconds(70)
"""It loops until its remaining time runs short: a one-minute schedule plus a short handover."""
MEMORY = 1024
CONCURRENCY = 2
"""A tick may overlap the previous one's last seconds; two coordinators at once are harmless."""
MAX_EVENT_AGE = Duration.minutes(1)
"""A start older than this is dropped: by then the next tick has come."""


class Coordinator(Construct):
    """The coordinator Lambda, started by an EventBridge schedule.

    In low-latency mode, S3 "Object Created" events under ``<prefix>/*/msg/`` and
    ``<prefix>/*/inbox/`` (sent through EventBridge) start it too. Its reserved concurrency
    throttles those starts while coordinators run, and throttled starts expire after
    `MAX_EVENT_AGE`, so a burst of enqueues only wakes an idle coordinator.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        code_dir: Path,
        layers: Sequence[lambda_.ILayerVersion],
        bucket: s3.IBucket,
        prefix: str,
        workers: Mapping[str, tuple[str, QueueSettings]],
        schedule: str,
        low_latency: bool,
        reserve_concurrency: bool,
        removal_policy: RemovalPolicy,
        encryption_key: kms.IKey | None = None,
        memory: int = MEMORY,
    ) -> None:
        super().__init__(scope, construct_id)
        queues = QueueMap(
            functions={queue: name for queue, (name, _) in workers.items()},
            settings={queue: settings for queue, (_, settings) in workers.items()},
        )
        self.runtime = QueueFunction(
            self,
            "Runtime",
            code=lambda_.Code.from_asset(str(code_dir), exclude=["**/__pycache__", "**/*.pyc"]),
            handler=HANDLER,
            description="S3Queue coordinator: leads each queue, publishes tickets, reaps leases",
            layers=layers,
            environment={
                ENV_BUCKET: bucket.bucket_name,
                ENV_PREFIX: prefix,
                ENV_QUEUES: queues.encode(),
            },
            encryption_key=encryption_key,
            timeout=TIMEOUT,
            memory=memory,
            reserved_concurrency=CONCURRENCY if reserve_concurrency else None,
            max_event_age=MAX_EVENT_AGE,
            removal_policy=removal_policy,
        )
        self.function: lambda_.Function = self.runtime.function
        self._add_starts(bucket, prefix, schedule, low_latency)

    def _add_starts(
        self, bucket: s3.IBucket, prefix: str, schedule: str, low_latency: bool
    ) -> None:
        """The schedule rule, and in low-latency mode the object-created rule."""
        target = targets.LambdaFunction(
            self.function, max_event_age=MAX_EVENT_AGE, retry_attempts=2
        )
        self.schedule = events.Rule(
            self,
            "Schedule",
            description="Starts the S3Queue coordinator",
            schedule=events.Schedule.expression(schedule),
            targets=[target],
        )
        self.object_created: events.Rule | None = None
        if low_latency:
            self.object_created = events.Rule(
                self,
                "ObjectCreated",
                description="Starts the S3Queue coordinator when a message arrives",
                event_pattern=object_created_pattern(bucket, prefix),
                targets=[target],
            )


def object_created_pattern(bucket: s3.IBucket, prefix: str) -> events.EventPattern:
    """New objects under any queue's ``msg/`` or ``inbox/`` (not the coordinator's own writes)."""
    return events.EventPattern(
        source=["aws.s3"],
        detail_type=["Object Created"],
        detail={
            "bucket": {"name": [bucket.bucket_name]},
            "object": {
                "key": [{"wildcard": f"{prefix}/*/msg/*"}, {"wildcard": f"{prefix}/*/inbox/*"}]
            },
        },
    )
