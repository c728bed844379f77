"""Throughput: N messages drained by the local runtime with W workers, against the S3 ceiling.

For each W, on one new boto3 client (the same for all three measurements):

1. the ceiling: W threads loop PUT, GET, LIST (10 keys), DELETE of small objects for a fixed
   time; S3 operations per second is what this server sustains from this client (measured
   before and after the drain, and averaged, since other work shares the machine);
2. N messages enqueued one by one (one PUT each, 8 producer threads);
3. the runtime (`run_local`, W worker threads and the coordinator loop) drains them with a
   handler that does nothing; the run ends when every handler finished and every ticket was
   applied (seen through events, so no counting of the runtime's own drain check).

The runtime's S3 operations per second over that run, divided by the ceiling, is the fraction
of the server the queue turns into work; messages per second is that divided by the requests
each message costs. Worker utilisation is the summed claim-to-applied time of the tickets over
W times the run's length: well below 1 means the workers waited for tickets (the coordinator,
which publishes tickets one at a time, set the pace).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from s3queue.producing.producer import Queue
from s3queue.storage.s3 import S3Storage

from bench.local import LocalRun, Tracker, noop
from bench.measure import Meter, enqueue_all, load, per_message
from bench.plan import Plan
from bench.progress import Progress
from bench.target import Space, Target

QUEUE = "bench"
BODY = b"x" * 256
Report = Callable[[float, str], None]


def run(target: Target, plan: Plan, progress: Progress) -> dict[str, Any]:
    points = []
    for i, workers in enumerate(plan.workers):

        def report(fraction: float, detail: str, i: int = i) -> None:
            progress.update((i + fraction) / len(plan.workers), detail)

        points.append(point(target, plan, workers, report))
    return {
        "params": {
            "messages": plan.messages,
            "workers": list(plan.workers),
            "ceiling_seconds": plan.ceiling_seconds,
            "enqueue": "enqueue() one by one, 8 producer threads, before the runtime starts",
            "handler": "does nothing",
            "settings": "QueueSettings() defaults: batch_size 10, max_in_flight_tickets 32",
            "ceiling_mix": "per thread: PUT 256 B, GET it, LIST 10 keys, DELETE it, in a loop",
        },
        "points": points,
    }


def point(target: Target, plan: Plan, workers: int, report: Report) -> dict[str, Any]:
    """Ceiling, enqueue, drain, ceiling again, with `workers` workers, on one client."""
    meter = Meter(target.client())
    space = target.space(f"tp{workers}")
    load_before = load()
    warm_up(meter, space)
    report(0.0, f"W={workers}: S3 ceiling for {plan.ceiling_seconds:g}s")
    before = measure_ceiling(meter, space, workers, plan.ceiling_seconds)
    report(0.15, f"W={workers}: enqueue {plan.messages}")
    queue = Queue(QUEUE, bucket=space.bucket, s3=meter.client, prefix=space.prefix)
    _, enqueue_seconds = enqueue_all(queue, plan.messages)
    drained = drain(meter, space, workers, plan.messages, report)
    report(0.85, f"W={workers}: S3 ceiling again")
    after = measure_ceiling(meter, space, workers, plan.ceiling_seconds)
    ceiling = (before["ops_per_s"] + after["ops_per_s"]) / 2
    ops_per_s = drained["requests_total"] / drained["seconds"]
    return {
        "workers": workers,
        "ceiling_ops_per_s": round(ceiling, 1),
        "ceiling_runs": [before, after],
        "enqueue_seconds": round(enqueue_seconds, 2),
        "enqueue_per_s": round(plan.messages / enqueue_seconds, 1),
        **drained,
        "s3_ops_per_s": round(ops_per_s, 1),
        "fraction_of_ceiling": round(ops_per_s / ceiling, 3),
        "ceiling_messages_per_s": round(ceiling / drained["per_message"]["total"], 1),
        "load": {"before": load_before, "after": load()},
    }


def warm_up(meter: Meter, space: Space) -> None:
    """A few writes first: the server allocates a new bucket's storage on its first PUT."""
    for n in range(5):
        key = f"{space.prefix}/warm-up/{n}"
        meter.client.put_object(Bucket=space.bucket, Key=key, Body=BODY)
        meter.client.delete_object(Bucket=space.bucket, Key=key)


def measure_ceiling(meter: Meter, space: Space, threads: int, seconds: float) -> dict[str, Any]:
    """Raw S3 operations per second from `threads` threads on `meter`'s client."""
    client, bucket = meter.client, space.bucket
    deadline = time.monotonic() + seconds

    def loop(thread: int) -> None:
        base = f"{space.prefix}/ceiling/{thread:03d}/"
        n = 0
        while time.monotonic() < deadline:
            key = f"{base}{n:08d}"
            client.put_object(Bucket=bucket, Key=key, Body=BODY)
            client.get_object(Bucket=bucket, Key=key)["Body"].read()
            client.list_objects_v2(Bucket=bucket, Prefix=base, MaxKeys=10)
            client.delete_object(Bucket=bucket, Key=key)
            n += 1

    meter.reset()
    started = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(loop, range(threads)))
    elapsed = time.monotonic() - started
    counts = meter.counts()
    return {
        "ops_per_s": round(sum(counts.values()) / elapsed, 1),
        "seconds": round(elapsed, 2),
        "threads": threads,
        "requests": counts,
    }


def drain(
    meter: Meter, space: Space, workers: int, messages: int, report: Report
) -> dict[str, Any]:
    """Run the local runtime until all `messages` are handled and applied; what it cost."""

    def done(n: int) -> None:
        if n % 50 == 0 or n == messages:
            report(0.2 + 0.65 * n / messages, f"W={workers}: {n}/{messages} handled")

    tracker = Tracker(on_done=done)
    tracker.expect(messages)
    storage = S3Storage(meter.client, space.bucket)
    run = LocalRun(storage, QUEUE, noop, prefix=space.prefix, workers=workers, listener=tracker)
    meter.reset()
    with run.running():
        complete = tracker.wait(timeout=60 + messages / 5)
        seconds = time.monotonic() - run.started
        counts = meter.counts()
    if not complete:
        raise RuntimeError(f"W={workers}: {tracker.finished}/{messages} handled before timeout")
    first, last = tracker.first_start_ms, tracker.last_finish_ms
    window = (last - first) / 1000 if first is not None and last is not None else seconds
    return {
        "seconds": round(seconds, 2),
        "messages_per_s": round(messages / seconds, 1),
        "handler_window_seconds": round(window, 2),
        "tickets": len(tracker.applied),
        "dispatching_ticks": len(tracker.dispatch_ticks),
        "worker_utilisation": round(tracker.busy_ms / 1000 / (workers * seconds), 3),
        "requests": counts,
        "requests_total": sum(counts.values()),
        "per_message": per_message(counts, messages),
    }
