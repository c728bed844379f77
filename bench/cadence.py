"""Idle cost on the coordinator Lambda's cadence: what one scheduled run does to S3.

EventBridge starts the coordinator Lambda once a minute, so a queue's idle cost per minute is
what one idle invocation costs it. Two measurements:

- ``idle_invocation``: the real handler of ``functions/coordinator/app.py``, loaded as Lambda
  loads it, invoked with a scheduled event and a fake context on queues with nothing to do. Its
  boto3 S3 client is the one `container()` builds, wrapped to count every request.
- ``busy_minute``: one message arrives; `serve` runs as that handler runs it (default
  `ServeSettings`, a `Gauges` like the app's), on a `FakeClock` so its waits take no time, with a
  worker processing each ticket inline. It ticks while there is work, then probes until every
  queue has been quiet for ``linger`` seconds, then releases its leases: the cost of a minute in
  which work arrived.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import logging
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from s3queue.common.clock import FakeClock
from s3queue.contract import environment as config
from s3queue.dispatching.coordinator import Coordinator
from s3queue.dispatching.gauges import Gauges
from s3queue.dispatching.service import ServeSettings, serve
from s3queue.local.metering import RequestCounter
from s3queue.local.seaweed import ANY_CREDENTIALS
from s3queue.producing.producer import Queue
from s3queue.storage.s3 import S3Storage
from s3queue.working.worker import Worker

from bench.local import noop
from bench.measure import Meter, billed
from bench.target import Space, Target

ROOT = Path(__file__).resolve().parents[1]
COORDINATOR_APP = ROOT / "functions" / "coordinator" / "app.py"
LAMBDA_TIMEOUT_MS = 70_000
"""The coordinator function's timeout (cdk/s3queue_cdk/coordinator.py)."""


@dataclass
class FakeContext:
    """The attributes of a Lambda context that the handler and Powertools read."""

    function_name: str = "S3Queue-coordinator"
    function_version: str = "$LATEST"
    memory_limit_in_mb: int = 256
    aws_request_id: str = "bench-0000-0000-0000-000000000000"
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:S3Queue-coord"
    log_group_name: str = "/aws/lambda/S3Queue-coordinator"
    log_stream_name: str = "bench"

    def get_remaining_time_in_millis(self) -> int:
        return LAMBDA_TIMEOUT_MS


def scheduled_event() -> dict[str, Any]:
    return {"detail-type": "Scheduled Event", "source": "aws.events", "detail": {}}


def idle_invocation(target: Target, queues: int, invocations: int = 3) -> dict[str, Any]:
    """S3 requests of the real coordinator handler on `queues` idle queues, per invocation."""
    space = target.space("cadence")
    names = [f"idle-{n}" for n in range(queues)]
    counters: list[RequestCounter] = []
    durations = []
    env = _lambda_env(target, space, names)
    with _environment(env), _isolated_logging(), contextlib.redirect_stdout(io.StringIO()):
        app: Any = _load_app()
        build = app.make_client

        def counted_client(*args: Any, **kwargs: Any) -> Any:
            client = build(*args, **kwargs)
            counters.append(RequestCounter.attach(client))
            return client

        app.make_client = counted_client
        app.container.cache_clear()
        for _ in range(invocations):
            started = time.perf_counter()
            summary = app.handler(scheduled_event(), FakeContext())
            durations.append(round((time.perf_counter() - started) * 1000, 1))
    counts = billed(counters[0].counts())
    total = sum(counts.values())
    return {
        "queues": queues,
        "invocations": invocations,
        "requests": counts,
        "per_invocation_per_queue": round(total / invocations / queues, 3),
        "handler_ms": durations,
        "last_summary": summary,
    }


def _lambda_env(target: Target, space: Space, queues: list[str]) -> dict[str, str]:
    """The coordinator function's environment, as the CDK stack sets it, for `queues`."""
    spec = config.QueueMap(functions={name: f"S3Queue_{name}" for name in queues})
    env = {
        config.ENV_BUCKET: space.bucket,
        config.ENV_PREFIX: space.prefix,
        config.ENV_QUEUES: spec.encode(),
        config.ENV_ENDPOINT_URL: target.endpoint_url,
        "AWS_DEFAULT_REGION": "us-east-1",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_LOG_LEVEL": "WARNING",
    }
    if target.embedded:
        env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"] = ANY_CREDENTIALS
    return env


def busy_minute(target: Target) -> dict[str, Any]:
    """One coordinator run (serve with the app's settings, on a FakeClock) that finds 1 message."""
    space = target.space("busy")
    queue = Queue("busy", bucket=space.bucket, s3=target.client(), prefix=space.prefix)
    queue.enqueue({"n": 1})
    clock = FakeClock(start_ms=time.time_ns() // 1_000_000)  # after the enqueue: it is due
    coordinator_meter, worker_meter = Meter(target.client()), Meter(target.client())
    worker = Worker(
        S3Storage(worker_meter.client, space.bucket), "busy", prefix=space.prefix, clock=clock
    )
    coordinator = Coordinator(
        S3Storage(coordinator_meter.client, space.bucket),
        "busy",
        invoker=lambda payload: _discard(worker.process(payload, noop)),
        prefix=space.prefix,
        clock=clock,
    )
    started = clock.now_ms()
    settings = ServeSettings()
    result = serve(
        [coordinator],
        remaining_ms=lambda: LAMBDA_TIMEOUT_MS - (clock.now_ms() - started),
        clock=clock,
        settings=settings,
        gauges=Gauges(lambda _queue, _values: None, clock),
    )
    return {
        "settings": {"linger": settings.linger, "max_idle_interval": settings.max_idle_interval},
        "serve": result.to_dict(),
        "run_seconds_on_fake_clock": round((clock.now_ms() - started) / 1000, 1),
        "coordinator_requests": coordinator_meter.counts(),
        "worker_requests": worker_meter.counts(),
    }


def _discard(_result: object) -> None:
    """An invoker returns nothing; the worker's result is not the coordinator's business."""


def _load_app() -> ModuleType:
    """``app`` of the coordinator's code root, under a name of its own (as Lambda imports it)."""
    name = "bench_coordinator_app"
    module = sys.modules.get(name)
    if module is not None:
        return module
    spec = importlib.util.spec_from_file_location(name, COORDINATOR_APP)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {COORDINATOR_APP}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def _isolated_logging() -> Iterator[None]:
    """Undo what importing the app does to logging (Powertools takes over the ``s3queue`` logger
    and filters the root handlers), so the scenarios that follow log as before.

    Powertools' handler stays on the logger, as tests/lambda_support.py leaves it: Powertools
    marks the logger it configured, and a later ``Logger()`` of the same service (the Lambda
    tests, in the same process) expects to find that handler there.
    """
    target = logging.getLogger("s3queue")
    saved = (target.level, target.propagate, list(target.filters))
    root_filters = {id(h): list(h.filters) for h in logging.root.handlers}
    try:
        yield
    finally:
        target.level, target.propagate, target.filters[:] = saved
        for handler in logging.root.handlers:
            if id(handler) in root_filters:
                handler.filters[:] = root_filters[id(handler)]
