"""Latency: enqueue-to-handler-start in the local runtime, at a steady low rate and in a backlog.

One runtime (``latency_workers`` workers) runs throughout. After one warm-up message:

- steady: one message every ``1 / steady_rate`` seconds for ``steady_seconds``, from one
  producer thread; each waits only for the coordinator's next tick and a free worker;
- backlog: ``backlog`` messages enqueued at once from 8 threads; each waits behind the ones
  before it, so the spread is the drain time.

Latency is the ``handler_start`` event's time minus the ``enqueue`` event's (taken before the
enqueue's PUT), both from the system clock, in milliseconds.
"""

from __future__ import annotations

import time
from typing import Any

from s3queue.local.runtime import LOCAL_SERVE
from s3queue.producing.producer import Queue
from s3queue.storage.s3 import S3Storage

from bench.local import LocalRun, Tracker, noop
from bench.measure import enqueue_all, load, summarize_ms
from bench.plan import Plan
from bench.progress import Progress
from bench.target import Target

QUEUE = "bench"
WAIT = 300.0


def run(target: Target, plan: Plan, progress: Progress) -> dict[str, Any]:
    space = target.space("latency")
    client = target.client()
    tracker = Tracker()
    queue = Queue(QUEUE, bucket=space.bucket, s3=client, prefix=space.prefix, listener=tracker)
    storage = S3Storage(client, space.bucket)
    workers = plan.latency_workers
    runtime = LocalRun(storage, QUEUE, noop, prefix=space.prefix, workers=workers, listener=tracker)
    load_before = load()
    with runtime.running():
        expected = _settle(tracker, [queue.enqueue({"warm-up": True})], 0)
        steady_ids = steady(queue, plan, progress)
        expected = _settle(tracker, steady_ids, expected)
        progress.update(0.6, f"backlog of {plan.backlog}")
        backlog_ids, enqueue_seconds = enqueue_all(queue, plan.backlog)
        _settle(tracker, backlog_ids, expected)
    steady_ms = tracker.latencies_ms(steady_ids)
    backlog_ms = tracker.latencies_ms(backlog_ids)
    return {
        "params": {
            "workers": workers,
            "steady_rate_per_s": plan.steady_rate,
            "steady_seconds": plan.steady_seconds,
            "backlog": plan.backlog,
            "handler": "does nothing",
            "runtime": (
                f"run_local: coordinator polls every {LOCAL_SERVE.busy_interval:g} s while busy, "
                f"{LOCAL_SERVE.idle_interval:g}-{LOCAL_SERVE.max_idle_interval:g} s idle"
            ),
        },
        "steady": {**summarize_ms(steady_ms), "samples_ms": steady_ms},
        "backlog": {
            **summarize_ms(backlog_ms),
            "enqueue_seconds": round(enqueue_seconds, 2),
            "span_seconds": round(tracker.span_ms(backlog_ids) / 1000, 2),
            "samples_ms": backlog_ms,
        },
        "load": {"before": load_before, "after": load()},
    }


def steady(queue: Queue, plan: Plan, progress: Progress) -> list[str]:
    """Enqueue at a fixed rate from one thread; the ids."""
    count = max(round(plan.steady_rate * plan.steady_seconds), 1)
    started = time.monotonic()
    ids = []
    for n in range(count):
        # A schedule, not a fixed sleep: a slow enqueue does not lower the rate.
        delay = started + n / plan.steady_rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        ids.append(queue.enqueue({"n": n}))
        progress.update(0.6 * (n + 1) / count, f"steady {n + 1}/{count}")
    return ids


def _settle(tracker: Tracker, ids: list[str], before: int) -> int:
    """Wait until `ids` are handled and applied too; the messages expected so far."""
    expected = before + len(ids)
    tracker.expect(expected)
    if not tracker.wait(WAIT):
        raise RuntimeError(f"latency: {tracker.finished}/{expected} handled after {WAIT:g}s")
    return expected
