"""aws_sim: the real producer, coordinator and worker code on simulated AWS, in virtual time.

Nothing here reaches AWS. The production code runs unchanged on a simulated region (sims3.py,
simlambda.py, simworld.py; every latency, limit and price with its source in simaws.py), in
virtual time (simkernel.py): an S3 request or an invoke costs its sampled latency on a shared
simulated clock, not wall time, so a 2-core machine gives AWS-scale figures for the code's
*waiting*; the code's own CPU is charged at `Model.cpu_scale` (reported as ``cpu``).

Runs, each a fresh region and deployment with the default queue settings as the stack deploys
them (``batch_size`` 10, worker concurrency 8, so at most 8 tickets in flight):

- capacity: open-loop producers offer more than one queue can take, `enqueue` (``single``)
  and `enqueue_many(100)` (``packed``); messages/s is handler starts per second after a
  warm-up; `queues` > 1 gives the curve of one coordinator function serving several queues;
- steady: producers at half the measured capacity until every message has started: enqueue to
  handler start p50/p99, S3 requests per message by kind, $ per million messages;
- after idle: messages far apart (each after an idle spell), scheduled coordinator vs
  low-latency mode (S3 Object Created events start it too): enqueue-to-start, and what the
  low-latency mode costs more per message;
- group commit: many callers of single `enqueue` through one `Queue.batching()` (simgroup.py);
- issue 22's figures over several seeds (simscale.py): the overload pair, one sharded queue
  before and after S3's split and its cost when it keeps up, p99 at half capacity.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from s3queue.contract.settings import QueueSettings
from s3queue.producing.producer import Queue

from bench import simgroup, simmeasure
from bench.plan import Plan
from bench.progress import Progress
from bench.simaws import AWS, Model
from bench.sims3 import Pacing, sim_storage
from bench.simworld import PREFIX, World, WorldConfig, settings_from
from bench.target import Target

PACK = 100


@dataclass(frozen=True)
class Capacity:
    """One capacity point: a mode, a number of queues, an offered rate per queue."""

    mode: str
    queues: int
    offered_per_s: float
    warmup_s: float
    seconds: float

    @property
    def pack(self) -> int:
        return PACK if self.mode == "packed" else 1


def variant_mode(variant: str) -> tuple[str, str]:
    """``packed:name=value,...`` -> ("packed", the settings); else ("single", it all)."""
    mode, sep, text = variant.partition(":")
    return (mode.strip(), text) if sep else ("single", variant)


def run(target: Target, plan: Plan, progress: Progress) -> dict[str, Any]:
    """Every run of the scenario (see the module docstring); `target` is not used."""
    model, settings = (
        replace(AWS, cpu_scale=plan.aws_sim_cpu_scale),
        settings_from(plan.aws_sim_settings),
    )
    steps = 2 * (1 + len(plan.aws_sim_queues)) + 5 + len(plan.aws_sim_variants)
    done = 0

    def step(what: str) -> None:
        nonlocal done
        done += 1
        progress.update(done / steps, what)

    out: dict[str, Any] = {"params": _params(plan, model, settings), "model": model.to_dict()}
    for mode, offered in (
        ("single", plan.aws_sim_single_offered),
        ("packed", plan.aws_sim_packed_offered),
    ):
        curve = []
        for queues in plan.aws_sim_queues:
            point = Capacity(mode, queues, offered, plan.aws_sim_warmup, plan.aws_sim_seconds)
            curve.append(capacity(point, model, settings))
            step(f"{mode} capacity, {queues} queue(s)")
        first = curve[0]
        steady_rate = max(first["msgs_per_s_per_queue"] / 2, 1.0)
        result = {
            "msgs_per_s": first["msgs_per_s_per_queue"],
            "curve": curve,
            "steady": steady(mode, steady_rate, plan, model, settings),
        }
        result["latency_ms"] = result["steady"]["latency_ms"]
        result["usd_per_million"] = result["steady"]["usd_per_million"]
        out[mode] = result
        step(f"{mode} steady")
    out["after_idle"] = {
        "scheduled": after_idle(False, plan, model, settings),
        "low_latency": None,
    }
    step("after idle, scheduled")
    out["after_idle"]["low_latency"] = after_idle(True, plan, model, settings)
    step("after idle, low latency")
    busy = steady(
        "single", out["single"]["steady"]["offered_per_s"], plan, model, settings, low_latency=True
    )
    out["after_idle"]["busy_low_latency"] = busy
    step("busy, low latency")
    idle = out["after_idle"]
    idle["low_latency_extra_usd_per_message"] = round(
        idle["low_latency"]["usd_per_message"] - idle["scheduled"]["usd_per_message"], 8
    )
    low, scheduled = idle["low_latency"]["usd_per_million"], idle["scheduled"]["usd_per_million"]
    idle["low_latency_extra_usd_per_million_by_part"] = {
        part: round(low[part] - scheduled[part], 4) for part in low
    }
    out["variants"] = []
    for variant in plan.aws_sim_variants:
        mode, text = variant_mode(variant)
        if mode == "packed":
            offered, seconds = (
                plan.aws_sim_packed_variant_offered,
                plan.aws_sim_packed_variant_seconds,
            )
            point = Capacity(mode, 1, offered, plan.aws_sim_warmup, seconds)
        else:
            offered = plan.aws_sim_variant_offered
            point = Capacity(mode, 1, offered, plan.aws_sim_warmup, plan.aws_sim_seconds)
        result = capacity(point, model, settings_from(text, settings))
        out["variants"].append({"settings": text, **result})
        step(f"variant {variant}")
    _overloads(out, plan, model, settings, step)
    timing = (plan.aws_sim_warmup, plan.aws_sim_gc_seconds)
    out["group_commit"] = simgroup.runs(
        plan.aws_sim_gc_callers,
        plan.aws_sim_gc_windows,
        plan.aws_sim_gc_offered,
        timing,
        model,
        settings,
    )
    step("group commit")
    out["sqs_usd_per_million"] = model.prices.sqs_per_million_messages
    return out


def _overloads(
    out: dict[str, Any],
    plan: Plan,
    model: Model,
    settings: QueueSettings,
    step: Callable[[str], None],
) -> None:
    """The overload runs (one seed); issue 22's figures over seeds follow (simscale.py)."""
    out["overload"] = overload(plan, model, settings)
    out["overload_standard_producers"] = overload(plan, model, settings, adaptive=False)
    step("overload")


def _params(plan: Plan, model: Model, settings: QueueSettings) -> dict[str, Any]:
    return {
        "time": "virtual (simkernel.py): AWS latencies on a simulated clock, not wall time",
        "cpu_scale": model.cpu_scale,
        "queue_settings": f"{plan.aws_sim_settings or 'defaults'} as deployed: batch_size "
        f"{settings.batch_size}, concurrency {settings.concurrency}, max_in_flight_tickets "
        f"{min(settings.max_in_flight_tickets, settings.concurrency)}, handler 0 ms",
        "offered_per_queue": {
            "single": plan.aws_sim_single_offered,
            "packed": plan.aws_sim_packed_offered,
            "variants": plan.aws_sim_variant_offered,
        },
        "warmup_s": plan.aws_sim_warmup,
        "window_s": plan.aws_sim_seconds,
        "steady_s": plan.aws_sim_steady,
        "queues": list(plan.aws_sim_queues),
        "variants": list(plan.aws_sim_variants),
        "idle_messages": plan.aws_sim_idle_messages,
        "idle_gap_s": plan.aws_sim_idle_gap,
        "group_commit": {
            "offered_per_s": plan.aws_sim_gc_offered,
            "callers": list(plan.aws_sim_gc_callers),
            "windows_s": list(plan.aws_sim_gc_windows),
            "seconds": plan.aws_sim_gc_seconds,
        },
    }


def capacity(point: Capacity, model: Model, settings: QueueSettings) -> dict[str, Any]:
    """Offer more than the queue takes; handler starts per second once warmed up."""
    world = World(WorldConfig(queues=point.queues, settings=settings), model)
    end = point.warmup_s + point.seconds
    world.produce(
        calls_per_s=point.offered_per_s / point.pack, pack=point.pack, start_s=0, end_s=end
    )
    try:
        world.run_until(point.warmup_s)
        before = simmeasure.snapshot(world)
        world.run_until(end)
        spent = simmeasure.window(before, simmeasure.snapshot(world))
        total = simmeasure.rate(world, point.warmup_s, end)
        per_queue = round(total / point.queues, 1)
        return {
            "mode": point.mode,
            "queues": point.queues,
            "offered_per_s_per_queue": point.offered_per_s,
            "msgs_per_s_total": total,
            "msgs_per_s_per_queue": per_queue,
            "offered_bound": per_queue >= 0.9 * point.offered_per_s,
            "window_s": [point.warmup_s, end],
            "enqueued": world.enqueued,
            "enqueue_failures": world.enqueue_failures,
            "slowdowns_503": sum(world.s3.meter.slowdowns.values()),
            "where_time_goes": simmeasure.where_time_goes(world, spent, point.warmup_s, end),
            # full collections of the simulation's shared heap, charged to no actor (simkernel)
            "gc_excluded_ms": round(world.kernel.gc_excluded_ms),
            "errors": world.kernel.errors[:5],
        }
    finally:
        world.stop()


def steady(
    mode: str,
    rate: float,
    plan: Plan,
    model: Model,
    settings: QueueSettings,
    *,
    low_latency: bool = False,
    seed: int = 13,
) -> dict[str, Any]:
    """A sustainable rate until every message has started: latency (of the messages enqueued
    after the warm-up), requests and dollars (of all). It spans a coordinator handover (each
    scheduled run serves for a minute, then the next one takes over)."""
    pack = PACK if mode == "packed" else 1
    world = World(WorldConfig(settings=settings, low_latency=low_latency, seed=seed), model)
    seconds = plan.aws_sim_warmup + plan.aws_sim_steady
    world.produce(calls_per_s=rate / pack, pack=pack, start_s=0, end_s=seconds)
    try:
        world.drain(seconds)
        messages = len(world.tracker.starts_ms)
        return {
            "offered_per_s": round(rate, 1),
            "seconds": seconds,
            "enqueued": world.enqueued,
            "started": messages,
            "redelivered": world.tracker.redelivered,
            "latency_ms": simmeasure.latency(world, plan.aws_sim_warmup),
            **simmeasure.requests(world, messages),
            **simmeasure.dollars(world, messages, model.prices),
            "coordinator": world.lam.functions["coordinator"].stats(),
            "errors": world.kernel.errors[:5],
        }
    finally:
        world.stop()


def overload(
    plan: Plan,
    model: Model,
    settings: QueueSettings,
    *,
    adaptive: bool = True,
    seed: int = 13,
    pacing: Pacing = "s3queue",
) -> dict[str, Any]:
    """`enqueue` offered above the prefix's write rate: what producers and the queue get
    (handler starts counted once the first coordinator run is going, 4 s in). `adaptive`:
    producers pace themselves as `Queue`'s own client does (`pacing`: or as botocore's
    adaptive mode does, to compare)."""
    config = WorldConfig(settings=settings, adaptive_producers=adaptive, seed=seed, pacing=pacing)
    world = World(config, model)
    rate, seconds = plan.aws_sim_overload_offered, plan.aws_sim_overload_seconds
    world.produce(calls_per_s=rate, pack=1, start_s=0, end_s=seconds)
    try:
        world.run_until(seconds)
        slowdowns: dict[str, int] = {}
        for (role, _), n in world.s3.meter.slowdowns.items():
            slowdowns[role] = slowdowns.get(role, 0) + n
        return {
            "offered_per_s": rate,
            "seconds": seconds,
            "enqueued_per_s": round(world.enqueued / seconds, 1),
            "enqueue_failures": world.enqueue_failures,
            "slowdowns_503_by_role": slowdowns,
            "requests_by_role": {
                role: dict(world.s3.meter.by_kind(role)) for role in ("producer", "coordinator")
            },
            "handler_starts_per_s": simmeasure.rate(world, min(4.0, seconds / 2), seconds),
            "handler_starts_from_s": min(4.0, seconds / 2),
            "errors": world.kernel.errors[:5],
        }
    finally:
        world.stop()


def after_idle(
    low_latency: bool, plan: Plan, model: Model, settings: QueueSettings
) -> dict[str, Any]:
    """One message after each idle spell: enqueue to start, and the cost of the whole run."""
    world = World(
        WorldConfig(settings=settings, low_latency=low_latency, schedule_offset_s=0.5), model
    )
    gap = plan.aws_sim_idle_gap
    for n in range(plan.aws_sim_idle_messages):
        at = (n + 1) * gap + world.rng.uniform(0, model.events.schedule_s)
        world.at(at, _one(world, n), name=f"idle-producer-{n}")
    end = (plan.aws_sim_idle_messages + 1) * gap + model.events.schedule_s
    try:
        world.run_until(end)
        messages = len(world.tracker.starts_ms)
        costs = simmeasure.dollars(world, messages, model.prices)
        return {
            "messages": messages,
            "idle_gap_s": gap,
            "run_s": end,
            "latency_ms": simmeasure.latency(world),
            "coordinator_invocations": world.lam.functions["coordinator"].invocations,
            "coordinator_throttled": world.lam.functions["coordinator"].throttles,
            "requests": simmeasure.requests(world, messages)["per_message"],
            "usd_per_message": round(costs["usd_per_million"]["total"] / 1e6, 8),
            **costs,
            "errors": world.kernel.errors[:5],
        }
    finally:
        world.stop()


def _one(world: World, n: int) -> Callable[[], None]:
    """A producer that enqueues one message."""
    queue = Queue(
        world.queues[0], storage=sim_storage(world.s3, "producer"), clock=world.clock, prefix=PREFIX
    )
    return lambda: world.enqueue(queue, 1, n)
