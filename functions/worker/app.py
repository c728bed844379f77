"""Worker Lambda: runs one queue's handler module on the tickets the coordinator sends.

Event: one ticket's `Invocation` ``{queue, ticket, etag, doc}``, or ``{"tickets": [...]}``.
Configuration is read once per container (``S3QUEUE_*``); the handler module is
``handlers.<queue>``; a handler that declares a pydantic model of its body gets bodies
validated and parsed (`s3queue.working.typed`). A Lambda timeout loses nothing: the worker stops
handling messages when the remaining time runs short (releasing the rest untouched), and the
ticket's lease lets the coordinator redeliver anything a killed invocation held.
"""

from __future__ import annotations

import functools
import importlib
import warnings
from dataclasses import dataclass
from typing import Any, cast

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from s3queue.common.events import Event
from s3queue.common.tally import METRICS, Tally
from s3queue.contract import metric_names, tracing
from s3queue.contract.environment import Environment
from s3queue.errors import ConfigError, S3QueueError
from s3queue.protocol.tickets import Invocation
from s3queue.storage.clients import make_client
from s3queue.storage.s3 import S3Storage
from s3queue.working.readahead import WORKER_POOL
from s3queue.working.typed import bind
from s3queue.working.worker import Handler, Worker, WorkResult

# An invocation whose tickets were all gone or busy has no metrics: that is normal.
warnings.filterwarnings("ignore", message="No application metrics to publish")

logger = Logger(service=metric_names.SERVICE)
metrics = Metrics(namespace=metric_names.NAMESPACE, service=metric_names.SERVICE)
tracer = tracing.tracer(metric_names.SERVICE)  # the X-Ray SDK only if asked: tracing.py

FAILED_STATUSES = frozenset({"lost"})
"""Tickets this invocation could not finish; the others were done or were not its to do."""


class MetricsListener(Tally):
    """Worker events as metrics: the counters of `Tally`, and each handler call's duration.

    The events are logged by the core already (through the ``s3queue`` logger, which is this
    function's Powertools logger), with the queue, ticket and message ids as keys.
    """

    def __call__(self, event: Event) -> None:
        for counter in self.classify(event):
            metrics.add_metric(METRICS[counter], MetricUnit.Count, 1)
        duration = event.fields.get("duration_ms") if event.kind == "handler_finish" else None
        if duration is not None:
            metrics.add_metric(metric_names.HANDLER_DURATION, MetricUnit.Milliseconds, duration)


@dataclass(frozen=True)
class Container:
    """What one Lambda container builds once: config, client, storage, handler and worker."""

    queue: str
    handler: Handler
    worker: Worker
    listener: MetricsListener


@functools.cache
def container() -> Container:
    env = Environment.from_env()
    if env.queue is None:
        raise ConfigError("S3QUEUE_QUEUE is not set: the worker does not know its queue")
    storage = S3Storage(make_client(env.endpoint_url, max_pool_connections=WORKER_POOL), env.bucket)
    module = importlib.import_module(f"handlers.{env.queue}")
    listener = MetricsListener([env.queue])
    worker = Worker(
        storage,
        env.queue,
        prefix=env.prefix,
        settings=env.settings,
        listener=listener,
        heartbeat_thread=True,
        chain=env.settings.chain,  # takes the successor the leader parked, if the queue parks
    )
    metrics.set_default_dimensions(**{metric_names.DIMENSION_QUEUE: env.queue})
    # Bound once per container: a handler that declares a body model gets it validated.
    return Container(env.queue, bind(module.handle), worker, listener)


def invocations(event: dict[str, Any]) -> list[Invocation]:
    """The tickets' invocations an invoke event holds."""
    tickets = event.get("tickets")
    if isinstance(tickets, list):
        return [cast("Invocation", t) for t in tickets if isinstance(t, dict)]
    return [cast("Invocation", event)] if "ticket" in event else []


@tracer.capture_method
def work(app: Container, invocation: Invocation, context: LambdaContext) -> list[dict[str, Any]]:
    """One ticket, then each successor the leader parked behind it (the worker takes them in
    turn); an S3QueueError is reported, not raised, so the other tickets still run."""
    ticket = str(invocation.get("ticket"))
    logger.append_keys(ticket=ticket)
    tracer.put_annotation("ticket", ticket)
    try:
        result: WorkResult = app.worker.process(
            invocation, app.handler, remaining_ms=context.get_remaining_time_in_millis
        )
    except S3QueueError as exc:
        logger.exception("ticket failed")
        return [{"ticket": ticket, "status": "error", "error": f"{type(exc).__name__}: {exc}"}]
    finally:
        logger.remove_keys(["ticket"])
    reports = []
    for each in result.each():
        counts = {kind: each.count(kind) for kind in ("done", "retry", "dead", "release")}
        logger.info("ticket %s", each.status, extra={"ticket": each.ticket, **counts})
        reports.append({"ticket": each.ticket, "status": each.status, **counts})
    return reports


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Process every ticket of the event; failures are listed in ``batchItemFailures``."""
    app = container()
    logger.append_keys(queue=app.queue)
    results = [r for invocation in invocations(event) for r in work(app, invocation, context)]
    errors = [r for r in results if r["status"] == "error"]
    if results and len(errors) == len(results):
        # Nothing worked because S3 failed: an error the function's alarm should see.
        raise S3QueueError(f"every ticket failed: {errors[0]['error']}")
    failures = [r for r in results if r["status"] in FAILED_STATUSES or r in errors]
    return {
        "queue": app.queue,
        "tickets": results,
        "batchItemFailures": [{"itemIdentifier": r["ticket"]} for r in failures],
    }
