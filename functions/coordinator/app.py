"""Coordinator Lambda: serves every queue of ``S3QUEUE_QUEUES`` for one scheduled run.

Started by the EventBridge schedule (and, in low-latency mode, by S3 "Object Created" events).
An idle run costs one LIST per queue; a busy one dispatches until its time runs short, then
hands its leases over. Two runs at once are harmless: each queue's lease picks one leader.
Queue gauges go out as CloudWatch embedded metrics (log lines), at most once a minute a queue.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from s3queue.common.clock import Clock, SystemClock
from s3queue.common.concurrency import Threads
from s3queue.contract import metric_names, tracing
from s3queue.contract.environment import ENV_QUEUES, Environment
from s3queue.contract.settings import CoordinatorSettings, QueueSettings
from s3queue.dispatching.coordinator import Coordinator
from s3queue.dispatching.gauges import Gauges
from s3queue.dispatching.invoke import Background, LambdaInvoker
from s3queue.dispatching.s3events import created_key, hot_queues
from s3queue.dispatching.schedules import Schedules
from s3queue.dispatching.service import serve
from s3queue.dispatching.sizing import Pace
from s3queue.errors import ConfigError
from s3queue.storage.clients import make_client, make_lambda_client
from s3queue.storage.s3 import S3Storage

logger = Logger(service=metric_names.SERVICE)
tracer = tracing.tracer(metric_names.SERVICE)  # the X-Ray SDK only if asked: tracing.py

UNITS = {metric_names.OLDEST_MESSAGE_AGE: MetricUnit.Seconds}
"""Every other gauge is a Count."""
INVOKE_THREADS = CoordinatorSettings().publish_concurrency
"""Invokes in flight at once: as many as a block's publications."""
CLOCK: Clock = SystemClock()
"""The run's clock (tests put a FakeClock here)."""


def publish(queue: str, values: dict[str, float]) -> None:
    """One embedded-metrics line of a queue's gauges, with the dimension the alarms use."""
    gauges = EphemeralMetrics(namespace=metric_names.NAMESPACE, service=metric_names.SERVICE)
    gauges.add_dimension(metric_names.DIMENSION_QUEUE, queue)
    for name, value in values.items():
        gauges.add_metric(name, UNITS.get(name, MetricUnit.Count), value)
    gauges.flush_metrics()


@dataclass(frozen=True)
class Container:
    """What one Lambda container builds once."""

    env: Environment
    storage: S3Storage
    invoker: LambdaInvoker
    settings: dict[str, QueueSettings]
    gauges: Gauges
    publisher: Threads
    """The threads that publish a tick's tickets at once, shared by every run of the container."""
    invokes: Background
    """The threads that send the invokes, so that no tick waits for them (invoke.py); each run
    drains them before it returns."""
    paces: dict[str, Pace]
    """How fast each queue's tickets finish (sizing.py), kept from run to run."""
    stepper: Threads
    """The threads that step the queues due at the same time at once (one per queue)."""
    schedules: Schedules
    """The slots of scheduled queues this container enqueued, kept from run to run."""


@functools.cache
def container() -> Container:
    env = Environment.from_env()
    if not env.queues.functions:
        raise ConfigError(f"{ENV_QUEUES} is empty: the coordinator has no queue to serve")
    return Container(
        env=env,
        storage=S3Storage(make_client(env.endpoint_url), env.bucket),
        invoker=LambdaInvoker(make_lambda_client(), env.queues.functions),
        settings=env.queues.settings,
        gauges=Gauges(publish, CLOCK),
        publisher=Threads(CoordinatorSettings().publish_concurrency, "s3queue-publish"),
        invokes=Background(Threads(INVOKE_THREADS, "s3queue-invoke").submit),
        paces={queue: Pace() for queue in env.queues.settings},
        stepper=Threads(len(env.queues.settings), "s3queue-queues"),
        schedules=Schedules(CLOCK),
    )


def coordinators(app: Container, owner: str) -> list[Coordinator]:
    """One coordinator per queue for this run (their state lives in S3, not in the container)."""
    return [
        Coordinator(
            app.storage,
            queue,
            invoker=app.invoker,
            prefix=app.env.prefix,
            settings=settings,
            coordination=CoordinatorSettings(),
            clock=CLOCK,
            owner=owner,
            run_all=app.publisher,
            pace=app.paces[queue],
            send=app.invokes,
            chain=settings.chain,  # park successors behind live tickets (a queue's choice)
        )
        for queue, settings in app.settings.items()
    ]


def trigger(event: dict[str, Any]) -> str:
    """What started this run, for the log."""
    kind = str(event.get("detail-type") or "invoke")
    key = created_key(event)
    return f"{kind}: {key}" if key else kind


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Serve every queue until they are idle or the invocation's time runs short."""
    app = container()
    logger.info("coordinator run", trigger=trigger(event), queues=sorted(app.settings))
    try:
        result = serve(
            coordinators(app, owner=context.aws_request_id[:12]),
            remaining_ms=context.get_remaining_time_in_millis,
            clock=CLOCK,
            gauges=app.gauges,
            hot=hot_queues(event, app.env.prefix) & app.settings.keys(),
            run_all=app.stepper,
            schedules=app.schedules,
        )
    finally:
        app.invokes.drain()  # no invoke left behind in a frozen container
    summary = result.to_dict()
    logger.info("coordinator run ended", **summary)
    return summary
