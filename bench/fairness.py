"""Fairness: a small partition's wait, alone and beside another partition's big backlog.

Two runs of the local runtime (``fairness_workers`` workers, tickets of 10, a handler that
sleeps 5 ms), each on a queue of its own:

- alone: ``fairness_small`` messages are enqueued into partition ``small`` at
  ``fairness_rate`` a second, and nothing else is in the queue;
- beside a backlog: first ``fairness_backlog`` single messages into partition ``big`` (from 8
  threads), then the runtime starts and the same small messages follow at the same rate while
  the backlog drains.

Reported: each small message's enqueue-to-handler-start (p50, p99, max) in both runs and the
ratio of the p99s (target <= 1.5), and how much of the backlog was still waiting when the
last small message started (so the small one really ran beside it, not after it).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from s3queue.message import Message
from s3queue.producing.producer import Queue

from bench.local import LocalRun, Tracker
from bench.measure import load, summarize_ms
from bench.plan import Plan
from bench.progress import Progress
from bench.target import Target

QUEUE = "fair"
WAIT = 600.0
HANDLER_S = 0.005


def handler(message: Message) -> None:
    time.sleep(HANDLER_S)


def run(target: Target, plan: Plan, progress: Progress) -> dict[str, Any]:
    load_before = load()
    alone = _case(target, plan, progress, "alone", 0, 0.0)
    beside = _case(target, plan, progress, "beside", plan.fairness_backlog, 0.5)
    ratio = beside["p99"] / alone["p99"] if alone["p99"] else None
    progress.update(1.0)
    return {
        "params": {
            "workers": plan.fairness_workers,
            "batch_size": 10,
            "handler_ms": HANDLER_S * 1000,
            "small_messages": plan.fairness_small,
            "small_rate_per_s": plan.fairness_rate,
            "backlog": plan.fairness_backlog,
        },
        "alone": alone,
        "beside_backlog": beside,
        "p99_ratio": round(ratio, 2) if ratio is not None else None,
        "load": {"before": load_before, "after": load()},
    }


def _case(
    target: Target, plan: Plan, progress: Progress, name: str, backlog: int, at: float
) -> dict[str, Any]:
    space = target.space(f"fairness-{name}")
    client = target.client()
    tracker = Tracker()
    queue = Queue(QUEUE, bucket=space.bucket, s3=client, prefix=space.prefix, listener=tracker)
    if backlog:
        progress.update(at, f"fairness: a backlog of {backlog}")
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda n: queue.enqueue({"big": n}, partition="big"), range(backlog)))
    storage = queue.storage
    runtime = LocalRun(
        storage,
        QUEUE,
        handler,
        prefix=space.prefix,
        workers=plan.fairness_workers,
        listener=tracker,
    )
    with runtime.running():
        small = _paced(queue, plan)
        progress.update(at + 0.25, f"fairness: {name}")
        deadline = time.monotonic() + WAIT
        while len(tracker.latencies_ms(small)) < len(small) and time.monotonic() < deadline:
            time.sleep(0.05)  # a bench may poll: until the last small message started
        left = backlog - sum(1 for i in list(tracker.started) if i not in small)
        tracker.expect(backlog + len(small))
        if not tracker.wait(WAIT):
            raise RuntimeError(f"fairness: {tracker.finished} handled after {WAIT:g}s")
    waits = tracker.latencies_ms(small)
    return {**summarize_ms(waits), "samples_ms": waits, "backlog_left_at_last_small": left}


def _paced(queue: Queue, plan: Plan) -> list[str]:
    """The small partition's messages at a fixed rate (a schedule, not a fixed sleep)."""
    started = time.monotonic()
    ids = []
    for n in range(plan.fairness_small):
        delay = started + n / plan.fairness_rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        ids.append(queue.enqueue({"small": n}, partition="small"))
    return ids
