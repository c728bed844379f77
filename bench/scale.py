"""Scale: a coordinator tick's requests and time with 1,000 / 10,000 / 100,000 pending messages.

One queue's backlog of single-message objects (as ``enqueue`` writes them, one object per
message) is grown to each size in turn. At each size a new coordinator (it takes the lease over
from the last one) runs ``scale_rounds`` rounds of: a dispatching tick (the first one also takes
the lease), then a saturated tick (every ticket slot taken), then a worker processes every ticket
(its requests are not the tick's). The coordinator's client counts every request of each tick.

The backlog is written cheaply: the first 1,000 objects through boto3 (their rate is reported,
to say what 100,000 would take that way), the rest on the embedded server with unsigned
keep-alive HTTP PUTs, elsewhere through boto3.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from s3queue.contract.settings import QueueSettings
from s3queue.dispatching.coordinator import Coordinator
from s3queue.protocol.keys import MsgKey, QueueKeys
from s3queue.protocol.records import encode_records, record_for
from s3queue.storage.s3 import S3Storage
from s3queue.working.worker import Worker

from bench.local import noop
from bench.measure import Meter, load, percentile
from bench.plan import Plan
from bench.progress import Progress
from bench.target import Space, Target

QUEUE = "bench"
BATCH_SIZE = 10
BOTO3_SAMPLE = 1_000


class Backlog:
    """Single-message objects of one queue, written in bulk; tracks how many are left."""

    def __init__(self, target: Target, space: Space) -> None:
        self.target, self.space = target, space
        self.keys = QueueKeys(space.prefix, QUEUE)
        self.base_ms = time.time_ns() // 1_000_000 - 86_400_000  # a day ago: all due
        self.written = 0
        self.consumed = 0
        self.writes: list[dict[str, Any]] = []

    @property
    def pending(self) -> int:
        return self.written - self.consumed

    def grow_to(self, size: int, progress: Progress, fraction: float) -> None:
        """Write objects until `size` are pending."""
        missing = size - self.pending
        if missing <= 0:
            return
        boto3_part = max(min(missing, BOTO3_SAMPLE - self.written), 0)
        for count, raw in ((boto3_part, False), (missing - boto3_part, True)):
            if count:
                self._write(count, raw=raw, progress=progress, fraction=fraction)

    def _write(self, count: int, *, raw: bool, progress: Progress, fraction: float) -> None:
        items = [self._item(self.written + n) for n in range(count)]

        def done(n: int) -> None:
            progress.update(fraction, f"writing backlog: {self.pending + n:,} objects")

        seconds = self.target.bulk_put(self.space, items, raw=raw, done=done)
        self.written += count
        method = "raw HTTP, 16 threads" if raw and self.target.embedded else "boto3, 16 threads"
        self.writes.append(
            {
                "objects": count,
                "method": method,
                "seconds": round(seconds, 2),
                "per_s": round(count / seconds, 1),
            }
        )

    def _item(self, n: int) -> tuple[str, bytes]:
        message_id = f"b{n:09d}"
        key = self.keys.msg_key(MsgKey(self.base_ms + n, message_id))
        return key, encode_records([record_for(message_id, {"n": n}, self.base_ms)], "bench")


def run(target: Target, plan: Plan, progress: Progress) -> dict[str, Any]:
    space = target.space("scale")
    backlog = Backlog(target, space)
    meter = Meter(target.client())
    worker = Worker(S3Storage(target.client(), space.bucket), QUEUE, prefix=space.prefix)
    # Tickets of BATCH_SIZE, not grown (sizing.py): every dispatching tick then has the same
    # work whatever the backlog, so its cost shows the scan's (grown tickets read up to
    # ``scan_pages`` pages a tick: bounded too, but by what the tick can dispatch).
    settings = QueueSettings(
        batch_size=BATCH_SIZE, max_batch_size=BATCH_SIZE, max_in_flight_tickets=plan.scale_in_flight
    )
    points = []
    sizes = plan.scale_backlogs
    for n, size in enumerate(sizes):
        fraction = n / len(sizes)
        backlog.grow_to(size, progress, fraction)
        progress.update(fraction + 0.5 / len(sizes), f"backlog {size:,}: ticking")
        points.append(measure_point(meter, space, worker, settings, size, plan.scale_rounds))
        backlog.consumed += points[-1]["messages_processed"]
    return {
        "params": {
            "backlogs": list(sizes),
            "rounds": plan.scale_rounds,
            "settings": f"batch_size {BATCH_SIZE} (max_batch_size {BATCH_SIZE}: no growth), "
            f"max_in_flight_tickets {plan.scale_in_flight}",
            "objects": "one message per object (what enqueue writes), keys a day in the past",
        },
        "backlog_writes": backlog.writes,
        "points": points,
        "flat": _flat(points),
    }


def measure_point(
    meter: Meter, space: Space, worker: Worker, settings: QueueSettings, size: int, rounds: int
) -> dict[str, Any]:
    """`rounds` times (dispatching tick, saturated tick, work) with `size` pending messages."""
    invocations: list[dict[str, Any]] = []
    coordinator = Coordinator(
        S3Storage(meter.client, space.bucket),
        QUEUE,
        invoker=invocations.append,
        prefix=space.prefix,
        settings=settings,
        owner=f"scale-{size}",
    )
    load_before = load()
    ticks, processed = [], 0
    for n in range(rounds):
        ticks.append(_tick(meter, coordinator, "takeover+dispatch" if n == 0 else "dispatch"))
        ticks.append(_tick(meter, coordinator, "saturated"))
        while invocations:
            result = worker.process(invocations.pop(0), noop)
            processed += len(result.outcomes)
    coordinator.release()
    return {
        "backlog": size,
        "ticks": ticks,
        "summary": {kind: _summary(ticks, kind) for kind in ("dispatch", "saturated")},
        "messages_processed": processed,
        "load": {"before": load_before, "after": load()},
    }


def _tick(meter: Meter, coordinator: Coordinator, kind: str) -> dict[str, Any]:
    meter.reset()
    started = time.perf_counter()
    result = coordinator.tick()
    ms = (time.perf_counter() - started) * 1000
    counts = {k: v for k, v in meter.counts().items() if v}
    return {"kind": kind, "ms": round(ms, 1), "requests": counts, "dispatched": result.dispatched}


def _summary(ticks: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """The most common request mix of one kind of tick, and its median time."""
    chosen = [t for t in ticks if t["kind"] == kind]
    if not chosen:
        return {}
    mixes = Counter(tuple(sorted(t["requests"].items())) for t in chosen)
    mix = dict(mixes.most_common(1)[0][0])
    return {
        "requests": mix,
        "requests_total": sum(mix.values()),
        "median_ms": round(percentile([t["ms"] for t in chosen], 50), 1),
        "ticks": len(chosen),
    }


def _flat(points: list[dict[str, Any]]) -> bool:
    """The same request mix, kind by kind, for each kind of tick at every backlog size."""
    for kind in ("dispatch", "saturated"):
        mixes = {str(p["summary"][kind].get("requests")) for p in points}
        if len(mixes) > 1:
            return False
    return True
