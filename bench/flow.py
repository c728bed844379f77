"""Flow control: S3 requests per message with and without pauses and priorities.

Each mode drains the same number of messages as the cost scenario does (`cost.measure`:
producer, coordinator and worker with a counted client each, a coordinator and a worker driven
by hand, default settings):

- ``plain``: ``enqueue`` one by one, a queue that never used a flow-control feature;
- ``after pause + resume``: the same, on a queue that was paused and resumed before (its
  controls document stays in the bucket: the coordinator sees it in each LIST of tickets);
- ``priorities 0 and 9``: the same, every other message with priority 9 (two lanes);
- ``enqueue_many(100)`` with and without ``priority=9``.

What to look for: the coordinator's requests per message. A queue that never uses priorities
or pauses pays exactly what it did; a pause costs a GET and a PUT at the producer (once) and
one GET at the coordinator (once per change); a priority in use costs its lane's LISTs.
"""

from __future__ import annotations

from typing import Any

from s3queue.producing.producer import Queue

from bench import cost
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


MODES: list[tuple[str, cost.Fill, bool]] = [
    ("plain", _plain, False),
    ("after pause + resume", _after_pause, False),
    ("priorities 0 and 9", _priorities, False),
    ("enqueue_many(100)", _packs(0), True),
    ("enqueue_many(100), priority 9", _packs(9), True),
]


def run(target: Target, plan: Plan, progress: Progress) -> dict[str, Any]:
    results = []
    for n, (label, fill, packed) in enumerate(MODES):
        messages = plan.cost_packed if packed else plan.cost_single
        progress.update(n / len(MODES), f"{label}: {messages} messages")
        results.append(cost.measure(target, label, messages, fill))
    return {
        "params": {
            "modes": [label for label, _, _ in MODES],
            "settings": "QueueSettings() defaults, as the cost scenario",
        },
        "modes": results,
    }
