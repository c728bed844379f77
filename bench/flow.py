"""Flow control: S3 requests per message with and without pauses, priorities and limits.

Each mode drains the same number of messages as the cost scenario does (`cost.measure`:
producer, coordinator and worker with a counted client each, a coordinator and a worker driven
by hand, default settings):

- ``plain``: ``enqueue`` one by one, a queue that never used a flow-control feature;
- ``after pause + resume``: the same, on a queue that was paused and resumed before (its
  controls document stays in the bucket: the coordinator sees it in each LIST of tickets);
- ``priorities 0 and 9``: the same, every other message with priority 9 (two lanes);
- ``enqueue_many(100)`` with and without ``priority=9``;
- ``rate_limit 100``: ``enqueue`` one by one, the queue limited to 100 handler starts a second
  (each ticket's starts taken from the queue's counter by its worker);
- ``partition caps``: ``enqueue`` one by one into 4 partitions, ``partition_rate_limit`` 25 and
  ``partition_concurrency`` 20 (a counter per partition; the caps counted by the leader);
- ``schedule``: a queue scheduled every minute, its slots enqueued by the coordinator, each
  dispatched and run; and what a coordinator step costs when no slot is due (bench/scheduled.py).

A limited queue is drained as fast as its limits allow: the hand-driven coordinator ticks again
0.1 s after a tick that dispatched nothing while messages were held (`cost.HELD_TICK_S`).

What to look for: the coordinator's requests per message. A queue that never uses priorities
or pauses pays exactly what it did; a pause costs a GET and a PUT at the producer (once) and
one GET at the coordinator (once per change); a priority in use costs its lane's LISTs; a rate
limit costs its worker a GET and a PUT per ticket and limit, and its coordinator the ticks it
makes while it waits for the next second.
"""

from __future__ import annotations

from typing import Any

from s3queue.contract.settings import QueueSettings
from s3queue.producing.producer import Queue

from bench import cost, scheduled
from bench.measure import enqueue_all
from bench.plan import Plan
from bench.progress import Progress
from bench.target import Target


def _plain(queue: Queue, messages: int) -> None:
    enqueue_all(queue, messages)


def _after_pause(queue: Queue, messages: int) -> None:
    queue.pause()
    queue.resume()
    enqueue_all(queue, messages)


def _priorities(queue: Queue, messages: int) -> None:
    for n in range(messages):
        queue.enqueue({"n": n}, priority=9 if n % 2 else 0)


def _packs(priority: int) -> cost.Fill:
    def fill(queue: Queue, messages: int) -> None:
        for start in range(0, messages, 100):
            bodies = ({"n": n} for n in range(start, min(start + 100, messages)))
            queue.enqueue_many(bodies, priority=priority)

    return fill


def _partitions(queue: Queue, messages: int) -> None:
    for n in range(messages):
        queue.enqueue({"n": n}, partition=f"tenant-{n % 4}")


RATE = QueueSettings(rate_limit=100)
CAPS = QueueSettings(partition_rate_limit=25, partition_concurrency=20)
MODES: list[tuple[str, cost.Fill, bool, QueueSettings | None]] = [
    ("plain", _plain, False, None),
    ("after pause + resume", _after_pause, False, None),
    ("priorities 0 and 9", _priorities, False, None),
    ("enqueue_many(100)", _packs(0), True, None),
    ("enqueue_many(100), priority 9", _packs(9), True, None),
    ("rate_limit 100", _plain, False, RATE),
    ("4 partitions, no limits", _partitions, False, None),
    ("4 partitions, partition caps", _partitions, False, CAPS),
]


def run(target: Target, plan: Plan, progress: Progress) -> dict[str, Any]:
    results = []
    for n, (label, fill, packed, settings) in enumerate(MODES):
        messages = plan.cost_packed if packed else plan.cost_single
        progress.update(n / len(MODES), f"{label}: {messages} messages")
        results.append(cost.measure(target, label, messages, fill, settings))
    slots = max(plan.cost_single // 10, 5)
    progress.update(len(MODES) / (len(MODES) + 1), f"{scheduled.LABEL}: {slots} slots")
    results.append(scheduled.measure(target, slots))
    return {
        "params": {
            "modes": [label for label, _, _, _ in MODES],
            "settings": "QueueSettings() defaults, as the cost scenario, but for the limits",
            "limits": {
                "rate_limit 100": {"rate_limit": RATE.rate_limit},
                "4 partitions, partition caps": {
                    "partition_rate_limit": CAPS.partition_rate_limit,
                    "partition_concurrency": CAPS.partition_concurrency,
                },
            },
        },
        "modes": results,
    }
