"""What a recurring schedule costs: S3 requests per slot, end to end, and per idle step.

One queue scheduled every minute (``QueueSettings(schedule=60)``), one coordinator and one
worker with a counted client each, driven by hand as in the cost scenario. The schedule reads
its own clock (a `FakeClock` moved a minute per slot; the coordinator and the worker keep the
real one, so leases and S3's time are as in production):

- *per slot*: move to the next slot, `Schedules.enqueue_due` (the coordinator enqueues it:
  marker and message), then tick and process until a tick finds nothing (dispatch, run,
  commit): every request of the three roles, divided by the slots;
- *idle step*: `enqueue_due` called again and again inside one slot, as a coordinator run does
  before each of its steps: its requests per call (the process remembers the slot it enqueued,
  so this should be none).
"""

from __future__ import annotations

from typing import Any

from s3queue.common.clock import FakeClock
from s3queue.contract.settings import QueueSettings
from s3queue.dispatching.coordinator import Coordinator
from s3queue.dispatching.schedules import Schedules
from s3queue.storage.s3 import S3Storage
from s3queue.working.worker import Worker

from bench.cost import MAX_TICKS, QUEUE, ROLES, price_per_million
from bench.local import noop
from bench.measure import BILLED, Meter, per_message
from bench.target import Target

EVERY_S = 60
SETTINGS = QueueSettings(schedule=EVERY_S)
IDLE_STEPS = 100
LABEL = f"schedule every {EVERY_S} s (per slot)"


def measure(target: Target, slots: int) -> dict[str, Any]:
    """The per-slot figures as a flow mode (`cost.measure`'s shape), and the idle step's."""
    space = target.space("schedule")
    meters = {role: Meter(target.client()) for role in ROLES}
    invocations: list[dict[str, Any]] = []
    coordinator = Coordinator(
        S3Storage(meters["coordinator"].client, space.bucket),
        QUEUE,
        invoker=invocations.append,
        prefix=space.prefix,
        settings=SETTINGS,
    )
    worker = Worker(
        S3Storage(meters["worker"].client, space.bucket),
        QUEUE,
        prefix=space.prefix,
        settings=SETTINGS,
    )
    clock = FakeClock()
    schedules = Schedules(clock)
    ticks = 0
    for _ in range(slots):
        clock.advance(EVERY_S)
        due = schedules.enqueue_due([coordinator])
        if due.enqueued != (QUEUE,):
            raise RuntimeError(f"schedule: the slot was not enqueued ({due})")
        ticks += _drain(coordinator, worker, invocations)
    by_role = {role: meter.counts() for role, meter in meters.items()}
    total = {kind: sum(counts[kind] for counts in by_role.values()) for kind in BILLED}
    per_slot = per_message(total, slots)
    before = meters["coordinator"].total()
    for _ in range(IDLE_STEPS):
        schedules.enqueue_due([coordinator])
    idle = (meters["coordinator"].total() - before) / IDLE_STEPS
    return {
        "mode": LABEL,
        "messages": slots,
        "ticks": ticks,
        "requests": total,
        "requests_by_role": by_role,
        "per_message": per_slot,
        "per_message_by_role": {
            role: per_message(counts, slots)["total"] for role, counts in by_role.items()
        },
        "usd_per_million": round(price_per_million(per_slot), 3),
        "idle_step": {"calls": IDLE_STEPS, "requests_per_call": idle},
    }


def _drain(coordinator: Coordinator, worker: Worker, invocations: list[dict[str, Any]]) -> int:
    """Tick and process until a tick dispatches nothing and sees no live ticket; the ticks."""
    for tick in range(1, MAX_TICKS):
        result = coordinator.tick()
        while invocations:
            worker.process(invocations.pop(0), noop)
        if not (result.dispatched or result.live_tickets or result.waiting):
            return tick
    raise RuntimeError(f"schedule: queue not drained after {MAX_TICKS} ticks")
