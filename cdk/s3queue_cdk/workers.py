"""`Workers`: one worker Lambda per handler module, all sharing one code asset."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from constructs import Construct
from s3queue.config import ENV_BUCKET, ENV_PREFIX, ENV_QUEUE, ENV_SETTINGS, QueueSettings
from s3queue.discovery import HandlerSpec

from s3queue_cdk.functions import QueueFunction

HANDLER = "worker.app.handler"
CODE_EXCLUDES = ["coordinator", "**/__pycache__", "**/*.pyc", "**/*.md"]
"""The coordinator has its own asset; everything else (``worker/``, ``handlers/``) ships."""
MAX_EVENT_AGE = Duration.minutes(5)
"""A dispatch older than this is dropped: the coordinator re-invokes an unclaimed ticket."""


def worker_code(functions_dir: Path) -> lambda_.Code:
    """The ``functions/`` folder minus ``coordinator/``, so the handler modules ship along."""
    return lambda_.Code.from_asset(str(functions_dir), exclude=CODE_EXCLUDES)


class Worker(Construct):
    """The worker Lambda of one queue, sized by its handler module's ``SETTINGS``."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        spec: HandlerSpec,
        code: lambda_.Code,
        layers: Sequence[lambda_.ILayerVersion],
        bucket: s3.IBucket,
        prefix: str,
        reserve_concurrency: bool,
        removal_policy: RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        self.queue = spec.queue
        self.settings: QueueSettings = spec.settings
        self.runtime = QueueFunction(
            self,
            "Runtime",
            code=code,
            handler=HANDLER,
            description=f"S3Queue worker of queue {spec.queue}",
            layers=layers,
            environment={
                ENV_BUCKET: bucket.bucket_name,
                ENV_PREFIX: prefix,
                ENV_QUEUE: spec.queue,
                ENV_SETTINGS: json.dumps(spec.settings.to_dict(), sort_keys=True),
            },
            timeout=Duration.seconds(spec.settings.timeout),
            memory=spec.settings.memory,
            reserved_concurrency=spec.settings.concurrency if reserve_concurrency else None,
            max_event_age=MAX_EVENT_AGE,
            removal_policy=removal_policy,
        )
        self.function: lambda_.Function = self.runtime.function


class Workers(Construct):
    """Every queue's worker, by queue name."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        handlers: Mapping[str, HandlerSpec],
        functions_dir: Path,
        layers: Sequence[lambda_.ILayerVersion],
        bucket: s3.IBucket,
        prefix: str,
        reserve_concurrency: bool,
        removal_policy: RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        code = worker_code(functions_dir)
        self.by_queue: dict[str, Worker] = {
            queue: Worker(
                self,
                queue,
                spec=spec,
                code=code,
                layers=layers,
                bucket=bucket,
                prefix=prefix,
                reserve_concurrency=reserve_concurrency,
                removal_policy=removal_policy,
            )
            for queue, spec in handlers.items()
        }
