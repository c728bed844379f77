"""One queue past one S3 partition: single enqueues offered to a sharded queue, in a fresh
bucket (one S3 partition: S3 has not split anything yet) and once S3 has split the queue's
key ranges (`S3Model.presplit` at every shard folder): ``python -m bench.simshards --help``.

Issue 22, item 2: at least 10,000 single-message enqueues a second delivered (handler starts)
by one queue after the split, at $6 or less per million messages; and what happens before.
Each figure is the median over seeds, with its minimum and maximum.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from typing import Any

from s3queue.contract.settings import QueueSettings
from s3queue.protocol.keys import QueueKeys

from bench import aws_sim, simmeasure
from bench.plan import DEFAULT
from bench.simaws import AWS, Model
from bench.sims3 import Pacing
from bench.simworld import PREFIX, World, WorldConfig

SETTINGS = "concurrency=64,max_in_flight_tickets=64,max_batch_size=1000,ticket_seconds=5"
"""A queue set up for throughput: 64 workers and as many tickets in flight (the default
`max_in_flight_tickets`, 32, would cap them), tickets grown up to 1,000 messages and about
5 s of life each (a ticket's fixed part, ~1-1.5 s on AWS, leaves the default 2 s little room
for messages: tickets stayed near 150). The defaults deliver about 1,000 a second."""
COORDINATOR_MEMORY = 1_769
"""...and deployed with ``-c s3queue:coordinatorMemory=1769``: one leader dispatches every
shard's messages, and at 1,024 MB (the default) its CPU held the queue to about 6,500 a second
(docs/performance.md, session 19)."""
PRODUCERS = 1_000
"""Producer actors: 400 (the simulation's default) make at most ~9,500 enqueues a second."""


def split_points(queue: str, shards: int) -> tuple[str, ...]:
    """Where S3 has split the bucket once each shard's tail has carried its load for a while:
    a range per shard folder, and one for the queue's own objects (tickets, lease)."""
    keys = QueueKeys(PREFIX, queue)
    folders = [keys.sharded(k).msg for k in range(shards)]
    return (*folders, keys.tickets, keys.lease)


def _world(
    shards: int, seed: int, *, split: bool, pacing: Pacing = "s3queue"
) -> tuple[Model, World]:
    """The sharded queue's world (`SETTINGS`, `COORDINATOR_MEMORY`), S3 split or not."""
    model: Model = replace(AWS, cpu_scale=DEFAULT.aws_sim_cpu_scale)
    if split:
        model = replace(model, s3=replace(model.s3, presplit=split_points("q00", shards)))
    settings: QueueSettings = aws_sim.settings_from(SETTINGS)
    config = WorldConfig(
        settings=settings,
        shards=shards,
        seed=seed,
        producers=PRODUCERS,
        pacing=pacing,
        coordinator_memory=COORDINATOR_MEMORY,
    )
    return model, World(config, model)


def one(
    shards: int,
    offered: float,
    seconds: float,
    warmup: float,
    *,
    split: bool,
    seed: int,
    pacing: Pacing = "s3queue",
) -> dict[str, Any]:
    """`offered` single enqueues a second for `seconds` (virtual); starts after `warmup`;
    the producers' shared client paced as `pacing` says."""
    model, world = _world(shards, seed, split=split, pacing=pacing)
    world.produce(calls_per_s=offered, pack=1, start_s=0, end_s=seconds)
    try:
        world.run_until(warmup)
        before = simmeasure.snapshot(world)
        world.run_until(seconds)
        spent = simmeasure.window(before, simmeasure.snapshot(world))
        started = len(world.tracker.starts_ms)
        slowdowns: dict[str, int] = {}
        for (role, _), n in world.s3.meter.slowdowns.items():
            slowdowns[role] = slowdowns.get(role, 0) + n
        return {
            "handler_starts_per_s": simmeasure.rate(world, warmup, seconds),
            "enqueued_per_s": round(world.enqueued / seconds, 1),
            "enqueue_failures": world.enqueue_failures,
            "slowdowns_503": sum(slowdowns.values()),
            "slowdowns_503_by_role": slowdowns,
            "usd_per_million": simmeasure.dollars(world, started, model.prices)["usd_per_million"][
                "total"
            ],
            "requests_per_message": simmeasure.requests(world, started)["per_message"],
            "splits_during_run": len(world.s3.partitions.splits),
            "where_time_goes": simmeasure.where_time_goes(world, spent, warmup, seconds),
            "errors": world.kernel.errors[:3],
        }
    finally:
        world.stop()


def steady(shards: int, rate: float, seconds: float, warmup: float, *, seed: int) -> dict[str, Any]:
    """After the split, `rate` single enqueues a second for `seconds`, then until every message
    started: what a message costs when the queue keeps up (every request of the run over every
    message, so no backlog is priced at its enqueue alone), handler starts a second from
    `warmup` to the end of the offer, and enqueue-to-start latency."""
    model, world = _world(shards, seed, split=True)
    world.produce(calls_per_s=rate, pack=1, start_s=0, end_s=seconds)
    try:
        drained = world.drain(seconds)
        started = len(world.tracker.starts_ms)
        return {
            "offered_per_s": rate,
            "enqueued_per_s": round(world.enqueued / seconds, 1),
            "handler_starts_per_s": simmeasure.rate(world, warmup, seconds),
            "drained_after_s": round(drained - seconds, 1),
            "started": started,
            "enqueued": world.enqueued,
            "usd_per_million": simmeasure.dollars(world, started, model.prices)["usd_per_million"],
            "requests_per_message": simmeasure.requests(world, started)["per_message"],
            "latency_ms": simmeasure.latency(world, warmup),
            "errors": world.kernel.errors[:3],
        }
    finally:
        world.stop()


def steady_runs(
    shards: int, rate: float, seconds: float, warmup: float, seeds: list[int]
) -> dict[str, Any]:
    """`steady` over `seeds`: each figure's median, minimum and maximum."""
    each = [steady(shards, rate, seconds, warmup, seed=s) for s in seeds]
    return {
        "offered_per_s": rate,
        "seconds": seconds,
        "seeds": seeds,
        "handler_starts_per_s": _spread([r["handler_starts_per_s"] for r in each]),
        "enqueued_per_s": _spread([r["enqueued_per_s"] for r in each]),
        "drained_after_s": _spread([r["drained_after_s"] for r in each]),
        "unstarted": _spread([r["enqueued"] - r["started"] for r in each]),
        "usd_per_million": _spread([r["usd_per_million"]["total"] for r in each]),
        "usd_per_million_by_part": each[0]["usd_per_million"],
        "requests_per_message": each[0]["requests_per_message"],
        "latency_p99_ms": _spread([r["latency_ms"]["p99"] for r in each]),
        "errors": [e for r in each for e in r["errors"]][:3],
    }


def runs(
    shards: int,
    offered: float,
    seconds: float,
    warmup: float,
    seeds: list[int],
    *,
    pacing: Pacing = "s3queue",
    splits: tuple[bool, ...] = (False, True),
) -> dict[str, Any]:
    """Before and after the split (`splits`), each over `seeds`: median, min and max of each
    figure."""
    out: dict[str, Any] = {
        "shards": shards,
        "offered_per_s": offered,
        "seconds": seconds,
        "starts_counted_from_s": warmup,
        "settings": f"{SETTINGS}, coordinator {COORDINATOR_MEMORY} MB",
        "seeds": seeds,
        "pacing": pacing,
    }
    for split in splits:
        name = "after_split" if split else "before_split"
        each = [
            one(shards, offered, seconds, warmup, split=split, seed=s, pacing=pacing) for s in seeds
        ]
        row: dict[str, Any] = {
            key: _spread([r[key] for r in each])
            for key in (
                "handler_starts_per_s",
                "enqueued_per_s",
                "enqueue_failures",
                "slowdowns_503",
                "usd_per_million",
            )
        }
        row["requests_per_message"] = each[0]["requests_per_message"]
        row["slowdowns_503_by_role"] = each[0]["slowdowns_503_by_role"]  # the first seed's
        row["where_time_goes"] = each[0]["where_time_goes"]
        row["errors"] = [e for r in each for e in r["errors"]][:3]
        out[name] = row
    return out


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.simshards", description=__doc__)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--offered", type=float, default=12_000.0, help="enqueues a second")
    parser.add_argument("--seconds", type=float, default=14.0, help="virtual s offered")
    parser.add_argument("--warmup", type=float, default=6.0, help="starts counted from")
    parser.add_argument("--seeds", default="1,2,3", help="the world's seeds, one run each")
    parser.add_argument(
        "--steady", type=float, default=0.0, help="also: this rate after the split, drained"
    )
    parser.add_argument(
        "--pacing",
        choices=["s3queue", "botocore"],
        default="s3queue",
        help="the producers' client paced as Queue's own is, or as botocore's adaptive mode",
    )
    parser.add_argument("--only", choices=["before", "after"], help="one side of the split")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    splits = {"before": (False,), "after": (True,), None: (False, True)}[args.only]
    out = runs(
        args.shards,
        args.offered,
        args.seconds,
        args.warmup,
        seeds,
        pacing=args.pacing,
        splits=splits,
    )
    if args.steady:
        out["steady"] = steady_runs(args.shards, args.steady, args.seconds, args.warmup, seeds)
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
