"""aws_sim's group-commit run: many callers of `enqueue`, one `Queue.batching()`, under load.

One producer process holds `callers` request threads (actors here) that share one
``queue.batching(window=...)``; together they offer `offered_per_s` single `enqueue` calls a
second, open loop (a caller whose next call is due while its last one still waits for its
object calls as soon as it returns, so the callers bound what is offered; none calls after the
load's end). The queue is deployed with the stack's defaults and drains until every message
started. The batcher's waits (its window, each caller's wait for its object) pass in virtual
time: the simulated clock offers `SimClock.condition`, which `s3queue.producing.batching` waits on.

Reported: durable messages a second, messages per object, the `enqueue` call's latency (call to
return: its object acknowledged), enqueue to handler start, S3 requests per message by kind and
role, and $ per million messages with the same pricing as the other runs.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from dataclasses import dataclass
from typing import Any

from s3queue.common.events import Event
from s3queue.contract.settings import QueueSettings
from s3queue.errors import S3QueueError
from s3queue.producing.producer import Queue

from bench import simmeasure
from bench.measure import summarize_ms
from bench.simaws import AWS, Model
from bench.sims3 import sim_storage
from bench.simworld import PREFIX, World, WorldConfig, settings_from


@dataclass(frozen=True)
class Load:
    """One group-commit point: callers sharing one batcher, its window, the offered rate."""

    callers: int
    window_s: float
    offered_per_s: float
    warmup_s: float
    seconds: float


@dataclass
class Calls:
    """What the callers saw: each call's latency, and the objects the batcher wrote."""

    call_ms: list[tuple[float, float]]
    """(call start, call to return) per acknowledged call, ms."""
    failures: int = 0
    objects: int = 0
    batched_messages: int = 0

    def __call__(self, event: Event) -> None:
        if event.kind == "enqueue" and event.fields.get("batched"):
            self.objects += 1
            self.batched_messages += len(event.fields["message_ids"])


def produce(world: World, load: Load, calls: Calls) -> None:
    """`load.callers` actors sharing one batcher, open loop from 0 to the load's end."""
    queue = Queue(
        world.queues[0],
        storage=sim_storage(world.s3, "producer"),
        clock=world.clock,
        prefix=PREFIX,
        listener=calls,
    )
    batch = queue.batching(window=load.window_s)
    kernel = world.kernel
    end_ms = kernel.start_ms + (load.warmup_s + load.seconds) * 1000

    def caller(n: int) -> None:
        for k in itertools.count():
            due = kernel.start_ms + (k * load.callers + n) / load.offered_per_s * 1000
            if due >= end_ms or kernel.local_ms() >= end_ms:  # a caller behind its schedule
                return  # offers nothing after the load's end: the drain is the queue's alone
            if due > kernel.local_ms():
                kernel.wait(due - kernel.local_ms(), "schedule")
            start = kernel.local_ms()
            try:
                batch.enqueue({"k": k, "n": n})
            except S3QueueError:
                calls.failures += 1
                continue
            calls.call_ms.append((start, kernel.local_ms() - start))
            world.enqueued += 1

    for n in range(load.callers):
        kernel.spawn(
            lambda n=n: caller(n),  # type: ignore[misc]
            at_ms=kernel.start_ms,
            name=f"caller-{n}",
            role="producer",
        )


def run(load: Load, model: Model, settings: QueueSettings) -> dict[str, Any]:
    """Offer the load, then drain until every message started (`World.drain`)."""
    world = World(WorldConfig(settings=settings), model)
    calls = Calls([])
    produce(world, load, calls)
    end = load.warmup_s + load.seconds
    try:
        elapsed = world.drain(end)
        messages = len(world.tracker.starts_ms)
        since = world.kernel.start_ms + load.warmup_s * 1000
        durable = [ms for at, ms in calls.call_ms if at >= since]
        until = world.kernel.start_ms + end * 1000
        returned = sum(1 for at, ms in calls.call_ms if since <= at + ms < until)
        return {
            "callers": load.callers,
            "window_s": load.window_s,
            "offered_per_s": load.offered_per_s,
            "seconds": end,
            "enqueued": world.enqueued,
            "enqueue_failures": calls.failures,
            "durable_per_s": round(returned / load.seconds, 1),
            "handler_starts_per_s": simmeasure.rate(world, load.warmup_s, end),
            "started": messages,
            "drained_s": round(elapsed - end, 1),
            "objects": calls.objects,
            "messages_per_object": round(calls.batched_messages / max(calls.objects, 1), 1),
            "enqueue_call_ms": summarize_ms([round(v, 1) for v in durable]),
            "latency_ms": simmeasure.latency(world, load.warmup_s),
            **simmeasure.requests(world, messages),
            **simmeasure.dollars(world, messages, model.prices),
            "s3_usd_per_million_by_role": simmeasure.s3_dollars_by_role(
                world, messages, model.prices
            ),
            "redelivered": world.tracker.redelivered,
            "errors": world.kernel.errors[:5],
        }
    finally:
        world.stop()


def runs(
    callers: tuple[int, ...],
    windows: tuple[float, ...],
    offered: float,
    timing: tuple[float, float],
    model: Model,
    settings: QueueSettings,
) -> dict[str, Any]:
    """Every (callers, window) point at one offered rate; the cheapest; SQS for comparison."""
    points = [run(Load(c, w, offered, *timing), model, settings) for c in callers for w in windows]
    cheapest = min(points, key=lambda p: p["usd_per_million"]["total"])
    return {
        "offered_per_s": offered,
        "runs": points,
        "cheapest": {
            "callers": cheapest["callers"],
            "window_s": cheapest["window_s"],
            "usd_per_million": cheapest["usd_per_million"]["total"],
        },
        "target_usd_per_million": 0.10,
        "sqs_batched_usd_per_million": model.prices.sqs_per_million_messages[
            "batched (10 per call)"
        ],
    }


def main(argv: list[str] | None = None) -> None:
    """Only the group-commit runs, as JSON on stdout: ``python -m bench.simgroup --help``."""
    parser = argparse.ArgumentParser(prog="python -m bench.simgroup", description=main.__doc__)
    parser.add_argument("--callers", default="64,256", help="callers sharing one batcher")
    parser.add_argument("--windows", default="0.02,0.05,0.1", help="the batcher's window, s")
    parser.add_argument("--offered", type=float, default=2_000.0, help="enqueue calls a second")
    parser.add_argument("--warmup", type=float, default=10.0, help="virtual s before measuring")
    parser.add_argument("--seconds", type=float, default=20.0, help="virtual s measured")
    parser.add_argument("--settings", default="", help="queue settings, name=value,...")
    args = parser.parse_args(argv)

    result = runs(
        tuple(int(c) for c in args.callers.split(",")),
        tuple(float(w) for w in args.windows.split(",")),
        args.offered,
        (args.warmup, args.seconds),
        AWS,
        settings_from(args.settings),
    )
    json.dump(result, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
