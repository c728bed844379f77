"""`Worker`: the Lambda of one queue, named ``<stack>_<queue>``, sized by its ``SETTINGS``."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from constructs import Construct
from s3queue.contract.discovery import HandlerSpec
from s3queue.contract.environment import ENV_BUCKET, ENV_PREFIX, ENV_QUEUE, ENV_SETTINGS
from s3queue.contract.settings import QueueSettings

from s3queue_cdk import bundling
from s3queue_cdk.dependencies import Platform
from s3queue_cdk.functions import ARCHITECTURE, RUNTIME, QueueFunction

HANDLER = "worker.app.handler"
MAX_EVENT_AGE = Duration.minutes(5)
"""A dispatch older than this is dropped: the coordinator re-invokes an unclaimed ticket."""


def worker_code(entry_dir: Path, handlers_dir: Path) -> lambda_.Code:
    """``worker/`` (the entry point), ``handlers/`` and the handlers' packages, for Lambda."""
    platform = Platform.of(RUNTIME.name, ARCHITECTURE.name)
    return bundling.worker_code(entry_dir=entry_dir, handlers_dir=handlers_dir, platform=platform)


def deployed_settings(settings: QueueSettings, reserve_concurrency: bool) -> QueueSettings:
    """`settings` as deployed: no more tickets in flight than the worker may run at once.

    Past its reserved concurrency Lambda throttles the coordinator's invokes, and a throttled
    event that ages out is dropped: a ticket waits for ``dispatch_timeout`` for nothing.
    """
    if not reserve_concurrency:
        return settings
    in_flight = min(settings.max_in_flight_tickets, settings.concurrency)
    return dataclasses.replace(settings, max_in_flight_tickets=in_flight)


class Worker(Construct):
    """The worker Lambda of one queue."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        spec: HandlerSpec,
        function_name: str,
        settings: QueueSettings,
        code: lambda_.Code,
        layers: Sequence[lambda_.ILayerVersion],
        bucket: s3.IBucket,
        prefix: str,
        reserve_concurrency: bool,
        removal_policy: RemovalPolicy,
        encryption_key: kms.IKey | None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.queue = spec.queue
        self.settings = settings
        self.function_name = function_name
        self.runtime = QueueFunction(
            self,
            "Runtime",
            code=code,
            handler=HANDLER,
            description=f"S3Queue worker of queue {spec.queue}",
            layers=layers,
            function_name=function_name,
            environment={
                ENV_BUCKET: bucket.bucket_name,
                ENV_PREFIX: prefix,
                ENV_QUEUE: spec.queue,
                ENV_SETTINGS: json.dumps(settings.delta(), sort_keys=True),
            },
            encryption_key=encryption_key,
            timeout=Duration.seconds(settings.timeout),
            memory=settings.memory,
            reserved_concurrency=settings.concurrency if reserve_concurrency else None,
            max_event_age=MAX_EVENT_AGE,
            removal_policy=removal_policy,
        )
        self.function: lambda_.Function = self.runtime.function
