"""Cost: S3 requests per message by kind and by role, and the price of a million messages.

Each mode enqueues the same number of messages (``enqueue`` one by one, ``enqueue_many`` in
packs of 10, 100, 1,000, or ``enqueue`` from 64 threads through one group commit,
``Queue.batching(window=0.05)``), then a coordinator and a worker drain them, driven by hand (tick,
process every ticket, until a tick finds nothing) as ``tests/test_budget.py`` does, with
default settings (10 refs a ticket). Producer, coordinator and worker each have a boto3 client
of their own with a `RequestCounter`, so every request is attributed to its role. Idle polling
is not in these figures (see the idle scenario); the runtime's own per-message figures, polling
included, are in the throughput scenario.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from s3queue.contract.settings import QueueSettings
from s3queue.dispatching.coordinator import Coordinator
from s3queue.producing.producer import Queue
from s3queue.storage.s3 import S3Storage
from s3queue.working.worker import Worker

from bench.local import noop
from bench.measure import BILLED, Meter, enqueue_all, load, per_message
from bench.plan import Plan
from bench.progress import Progress
from bench.target import Target

QUEUE = "bench"
PRICE_PER_REQUEST = {
    "PUT": 0.005 / 1000,
    "POST": 0.005 / 1000,
    "LIST": 0.005 / 1000,
    "GET": 0.0004 / 1000,
    "HEAD": 0.0004 / 1000,
    "DELETE": 0.0,
}
"""S3 Standard, us-east-1 list prices. DELETE (and multi-object delete) requests are free."""
SQS_PER_REQUEST = 0.40 / 1_000_000
SQS_REQUESTS = {"unbatched": 3.0, "batched (10 per call)": 0.3}
"""Send, receive and delete per message; a tenth of each with the 10-message batch calls."""
ROLES = ("enqueue", "coordinator", "worker")
GROUP_COMMIT_THREADS = 64
GROUP_COMMIT_WINDOW = 0.05
"""A busy service: 64 request threads, each enqueueing one message at a time, 50 ms window."""
GROUP_COMMIT = f"group commit ({GROUP_COMMIT_THREADS} threads, {GROUP_COMMIT_WINDOW * 1000:g} ms)"
Fill = Callable[[Queue, int], None]
MAX_TICKS = 10_000
HELD_TICK_S = 0.1


def run(target: Target, plan: Plan, progress: Progress) -> dict[str, Any]:
    modes: list[tuple[str, int, Fill]] = [("enqueue", plan.cost_single, _single)]
    modes += [(f"enqueue_many({k})", plan.cost_packed, _packs(k)) for k in plan.pack_sizes]
    modes.append((GROUP_COMMIT, plan.cost_single, _group_commit))
    results = []
    for n, (label, messages, fill) in enumerate(modes):
        progress.update(n / len(modes), f"{label}: {messages} messages")
        results.append(measure(target, label, messages, fill))
    return {
        "params": {
            "modes": [{"mode": label, "messages": m} for label, m, _ in modes],
            "settings": "QueueSettings() defaults: batch_size 10 (refs per ticket)",
            "drive": "coordinator.tick() then every ticket processed, until a tick finds nothing",
            "prices_per_1000": {k: v * 1000 for k, v in PRICE_PER_REQUEST.items()},
            "sqs_per_million_requests": SQS_PER_REQUEST * 1_000_000,
        },
        "modes": results,
        "sqs": {
            name: round(requests * SQS_PER_REQUEST * 1_000_000, 2)
            for name, requests in SQS_REQUESTS.items()
        },
    }


def _single(queue: Queue, messages: int) -> None:
    enqueue_all(queue, messages)


def _packs(pack: int) -> Fill:
    def fill(queue: Queue, messages: int) -> None:
        for start in range(0, messages, pack):
            queue.enqueue_many({"n": n} for n in range(start, min(start + pack, messages)))

    return fill


def _group_commit(queue: Queue, messages: int) -> None:
    batch = queue.batching(window=GROUP_COMMIT_WINDOW)
    with ThreadPoolExecutor(GROUP_COMMIT_THREADS) as pool:
        list(pool.map(lambda n: batch.enqueue({"n": n}), range(messages)))


def measure(
    target: Target,
    label: str,
    messages: int,
    fill: Fill,
    settings: QueueSettings | None = None,
) -> dict[str, Any]:
    """Requests per message to fill and drain a queue (`settings`: its QueueSettings)."""
    space = target.space("cost")
    meters = {role: Meter(target.client()) for role in ROLES}
    queue = Queue(QUEUE, bucket=space.bucket, s3=meters["enqueue"].client, prefix=space.prefix)
    load_before = load()
    fill(queue, messages)
    ticks = drain(space.bucket, space.prefix, meters, settings)
    by_role = {role: meter.counts() for role, meter in meters.items()}
    total = {kind: sum(counts[kind] for counts in by_role.values()) for kind in BILLED}
    per_msg = per_message(total, messages)
    return {
        "mode": label,
        "messages": messages,
        "ticks": ticks,
        "requests": total,
        "requests_by_role": by_role,
        "per_message": per_msg,
        "per_message_by_role": {
            role: per_message(counts, messages)["total"] for role, counts in by_role.items()
        },
        "usd_per_million": round(price_per_million(per_msg), 3),
        "load": {"before": load_before, "after": load()},
    }


def drain(
    bucket: str, prefix: str, meters: dict[str, Meter], settings: QueueSettings | None = None
) -> int:
    """Tick and process until a tick dispatches nothing and sees no live ticket and nothing
    held back; the ticks. A tick that dispatched nothing while limits held messages back is
    followed by a pause of `HELD_TICK_S`, a coordinator's cadence, not a busy loop."""
    invocations: list[dict[str, Any]] = []
    coordinator = Coordinator(
        S3Storage(meters["coordinator"].client, bucket),
        QUEUE,
        invoker=invocations.append,
        prefix=prefix,
        settings=settings,
    )
    worker = Worker(
        S3Storage(meters["worker"].client, bucket), QUEUE, prefix=prefix, settings=settings
    )
    for tick in range(1, MAX_TICKS):
        result = coordinator.tick()
        while invocations:
            worker.process(invocations.pop(0), noop)
        if not (result.dispatched or result.live_tickets or result.waiting):
            return tick
        if not result.dispatched and result.waiting:
            time.sleep(HELD_TICK_S)
    raise RuntimeError(f"cost: queue not drained after {MAX_TICKS} ticks")


def price_per_million(per_msg: dict[str, float]) -> float:
    """US dollars of S3 requests for a million messages."""
    return sum(per_msg.get(kind, 0.0) * price for kind, price in PRICE_PER_REQUEST.items()) * 1e6
