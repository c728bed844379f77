"""Idle: S3 requests per minute of a queue with nothing to do, and the first message after.

Local runtime (``run_local``, 2 workers, one queue): idle windows of ``idle_windows`` seconds,
each ended by one message whose enqueue-to-handler-start latency is recorded. The first window
comes right after start (the coordinator has never led: it only probes); later ones follow a
message (the coordinator ticks until the message is done, then probes again, keeping its lease
until it has been quiet for ``release_after`` = 30 s). The runtime's client counts every
request; a sampler records the total every half second, for the timeline plot. The producer has
a client of its own (not counted).

Lambda cadence: see `bench.cadence`.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from s3queue.local.runtime import LOCAL_SERVE
from s3queue.producing.producer import Queue
from s3queue.storage.s3 import S3Storage

from bench import cadence
from bench.local import LocalRun, Tracker, noop
from bench.measure import Meter, load
from bench.plan import Plan
from bench.progress import Progress
from bench.target import Target

QUEUE = "bench"
SAMPLE_EVERY = 0.5
WAIT = 120.0


class Sampler:
    """Records (seconds since start, requests so far) every half second, in a thread."""

    def __init__(self, meter: Meter) -> None:
        self.meter = meter
        self.samples: list[tuple[float, int]] = []
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY):
            self.samples.append((round(time.monotonic() - self.started, 2), self.meter.total()))

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def now(self) -> float:
        return round(time.monotonic() - self.started, 2)


def run(target: Target, plan: Plan, progress: Progress) -> dict[str, Any]:
    local = local_idle(target, plan, progress)
    progress.update(0.9, "coordinator Lambda, idle invocations")
    invocation = cadence.idle_invocation(target, plan.lambda_queues)
    progress.update(0.95, "coordinator Lambda, a run that finds one message")
    busy = cadence.busy_minute(target)
    return {
        "params": {
            "idle_windows_seconds": list(plan.idle_windows),
            "local_workers": 2,
            "local_serve": (
                f"run_local: idle probe backoff {LOCAL_SERVE.idle_interval:g} s doubling to "
                f"{LOCAL_SERVE.max_idle_interval:g} s"
            ),
            "lambda_queues": plan.lambda_queues,
            "lambda_schedule": "one invocation a minute (EventBridge rate(1 minute))",
        },
        "local": local,
        "lambda_idle": invocation,
        "lambda_busy_minute": busy,
    }


def local_idle(target: Target, plan: Plan, progress: Progress) -> dict[str, Any]:
    space = target.space("idle")
    meter = Meter(target.client())
    tracker = Tracker()
    queue = Queue(
        QUEUE, bucket=space.bucket, s3=target.client(), prefix=space.prefix, listener=tracker
    )
    storage = S3Storage(meter.client, space.bucket)
    runtime = LocalRun(storage, QUEUE, noop, prefix=space.prefix, workers=2, listener=tracker)
    total = sum(plan.idle_windows)
    windows, marks = [], []
    load_before = load()
    with runtime.running(), Sampler(meter) as sampler:
        elapsed = 0.0
        for n, seconds in enumerate(plan.idle_windows):
            progress.update(0.9 * elapsed / total, f"local runtime idle for {seconds:g}s")
            before = meter.counts()  # no reset: the sampler reads the same running total
            time.sleep(seconds)
            counts = {kind: n - before[kind] for kind, n in meter.counts().items()}
            marks.append(sampler.now())
            message_id = queue.enqueue({"after_idle_s": seconds})
            tracker.expect(n + 1)
            if not tracker.wait(WAIT):
                raise RuntimeError(f"idle: message after {seconds:g}s not handled in {WAIT:g}s")
            windows.append(_window(seconds, counts, tracker.latencies_ms([message_id])))
            elapsed += seconds
    return {
        "windows": windows,
        "message_marks_s": marks,
        "timeline": sampler.samples,
        "load": {"before": load_before, "after": load()},
    }


def _window(seconds: float, counts: dict[str, int], latency: list[int]) -> dict[str, Any]:
    total = sum(counts.values())
    return {
        "seconds": seconds,
        "requests": counts,
        "per_minute": round(total / seconds * 60, 1),
        "first_message_latency_ms": latency[0] if latency else None,
    }
