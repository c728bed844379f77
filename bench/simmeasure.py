"""What a simulated run measured: rates, latencies, requests and dollars per message, and where
the time of the coordinator, the workers and the tickets went."""

from __future__ import annotations

from collections import Counter
from typing import Any

from bench.measure import percentile, summarize_ms
from bench.simaws import Prices
from bench.simworld import World

Totals = dict[str, float]
Snapshot = dict[str, Totals]


def snapshot(world: World) -> Snapshot:
    """Virtual ms each role's actors spent so far, by cause ("cpu" for charged CPU)."""
    out: Snapshot = {}
    for actor in world.kernel.actors:
        totals = out.setdefault(actor.role, {})
        for cause, ms in [*actor.waited_ms.items(), ("cpu", actor.cpu_ms)]:
            totals[cause] = totals.get(cause, 0.0) + ms
    return out


def window(before: Snapshot, after: Snapshot) -> Snapshot:
    """What each role spent between two snapshots, largest first."""
    out: Snapshot = {}
    for role, totals in after.items():
        earlier = before.get(role, {})
        spent = {cause: ms - earlier.get(cause, 0.0) for cause, ms in totals.items()}
        out[role] = dict(sorted(((c, v) for c, v in spent.items() if v > 0), key=lambda cv: -cv[1]))
    return out


def rate(world: World, start_s: float, end_s: float) -> float:
    """Handler starts per second between two virtual times."""
    lo, hi = world.kernel.start_ms + start_s * 1000, world.kernel.start_ms + end_s * 1000
    count = sum(1 for t in world.tracker.starts_ms if lo <= t < hi)
    return round(count / (end_s - start_s), 1)


def latency(world: World, after_s: float = 0.0) -> dict[str, Any]:
    """Enqueue (before its PUT) to handler start, ms, of messages enqueued after `after_s`."""
    since = world.kernel.start_ms + after_s * 1000
    return summarize_ms([round(v, 1) for at, v in world.tracker.latencies_ms if at >= since])


def requests(world: World, messages: int) -> dict[str, Any]:
    """S3 requests per message, by kind and by role; 503 answers apart."""
    meter = world.s3.meter
    kinds = meter.by_kind()
    per = {
        k: round(kinds.get(k, 0) / max(messages, 1), 4)
        for k in ("PUT", "GET", "HEAD", "LIST", "DELETE")
    }
    per["total"] = round(sum(kinds.values()) / max(messages, 1), 4)
    roles = {
        role: round(sum(meter.by_kind(role).values()) / max(messages, 1), 4)
        for role in ("producer", "coordinator", "worker")
    }
    return {
        "messages": messages,
        "per_message": per,
        "per_message_by_role": roles,
        "slowdowns_503": sum(meter.slowdowns.values()),
        "s3_splits": [
            {"at_s": round(at / 1000, 1), "boundary": b} for at, b in world.s3.partitions.splits
        ],
    }


def dollars(world: World, messages: int, prices: Prices) -> dict[str, Any]:
    """USD per million messages: S3 requests (503s priced as requests too, to be safe), Lambda
    requests and GB-seconds (workers and coordinator; invocations still running are billed up
    to now), EventBridge events."""
    kinds = world.s3.meter.by_kind() + _slowdown_kinds(world)
    price = _per_request(prices)
    s3 = sum(n * price[kind] for kind, n in kinds.items())
    functions = world.lam.functions.values()
    invocations = sum(f.invocations + len(f.active) for f in functions)
    gb_s = sum(f.gb_s(world.kernel.now) for f in functions)
    events = world.schedule_events + world.s3_events
    parts = {
        "s3_requests": s3,
        "lambda_requests": invocations * prices.lambda_per_million / 1e6,
        "lambda_duration": gb_s * prices.lambda_gb_s,
        "eventbridge": events * prices.eventbridge_per_million / 1e6,
    }
    scale = 1e6 / max(messages, 1)
    per_million = {k: round(v * scale, 4) for k, v in parts.items()}
    per_million["total"] = round(sum(parts.values()) * scale, 4)
    return {
        "usd_per_million": per_million,
        "lambda_invocations": invocations,
        "lambda_gb_s": round(gb_s, 3),
        "events": {"schedule": world.schedule_events, "s3_object_created": world.s3_events},
    }


def s3_dollars_by_role(world: World, messages: int, prices: Prices) -> dict[str, Totals]:
    """S3 request USD per million messages by role and billed kind: where the S3 cost goes
    (503 answers not included)."""
    price, scale = _per_request(prices), 1e6 / max(messages, 1)
    out: dict[str, Totals] = {}
    for role in ("producer", "coordinator", "worker"):
        kinds = world.s3.meter.by_kind(role)
        out[role] = {k: round(n * price[k] * scale, 4) for k, n in sorted(kinds.items()) if n}
    return out


def _per_request(prices: Prices) -> dict[str, float]:
    """USD per request of each billed kind."""
    put_list, get = prices.s3_put_list_per_1000 / 1000, prices.s3_get_per_1000 / 1000
    return {
        "PUT": put_list,
        "LIST": put_list,
        "GET": get,
        "HEAD": get,
        "DELETE": prices.s3_delete_per_1000 / 1000,
    }


def _slowdown_kinds(world: World) -> Counter[str]:
    from bench.sims3 import BILLED_KIND  # noqa: PLC0415

    out: Counter[str] = Counter()
    for (_, op), n in world.s3.meter.slowdowns.items():
        out[BILLED_KIND[op]] += n
    return out


def where_time_goes(world: World, spent: Snapshot, start_s: float, end_s: float) -> dict[str, Any]:
    """The coordinator's time by cause, the workers' per ticket, the tickets' life stages, over
    the window from `start_s` to `end_s` (virtual seconds)."""
    tracker, settings = world.tracker, world.settings
    lo, hi = world.kernel.start_ms + start_s * 1000, world.kernel.start_ms + end_s * 1000
    seconds = end_s - start_s
    coordinator = spent.get("coordinator", {})
    total = sum(coordinator.values()) or 1.0
    tickets = [
        (tracker.dispatched_ms[k], tracker.claimed_ms.get(k), tracker.applied_ms.get(k))
        for k in tracker.dispatched_ms
        if lo <= tracker.dispatched_ms[k] < hi
    ]
    done = [(d, c, a) for d, c, a in tickets if c is not None and a is not None]
    worker = spent.get("worker", {})
    n_done = max(len(done), 1)
    ticks = [t for t in tracker.ticks if lo <= t[0] < hi]
    in_flight_ms = sum(a - d for d, _, a in done)
    functions = [f for f in world.lam.functions.values() if f.role == "worker"]
    return {
        "coordinator_share": {k: round(v / total, 3) for k, v in coordinator.items()},
        "coordinator_ticks": len(ticks),
        "dispatched_per_tick": round(sum(t[1] for t in ticks) / max(len(ticks), 1), 2),
        "ticks_at_in_flight_limit": round(
            sum(1 for t in ticks if t[2] >= settings.max_in_flight_tickets) / max(len(ticks), 1), 3
        ),
        "worker_ms_per_ticket": {k: round(v / n_done, 1) for k, v in worker.items()},
        "ticket_dispatch_to_claim_ms": _p50([c - d for d, c, _ in done]),
        "ticket_claim_to_applied_ms": _p50([a - c for _, c, a in done]),
        "in_flight_slot_use": round(
            in_flight_ms / (settings.max_in_flight_tickets * len(world.queues) * seconds * 1000), 3
        ),
        "worker_functions": [f.stats() for f in functions],
    }


def _p50(values: list[float]) -> float:
    return round(percentile(values, 50), 1) if values else 0.0
