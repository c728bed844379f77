"""`run_local`: the coordinator loop and a pool of worker threads in one process, on any S3.

The same code paths as on Lambda: `serve` over one `Coordinator` per queue, and
`Worker.process` per ticket payload with a Lambda-like remaining time. A local invoker (a queue
of payloads) stands in for ``lambda:Invoke``. Several runtimes on one bucket cooperate: each
queue's lease decides which one dispatches, and every worker processes what it is handed.
"""

from __future__ import annotations

import logging
import queue as queues
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from s3queue import admin
from s3queue.clock import SystemClock
from s3queue.config import DEFAULT_PREFIX, CoordinatorSettings
from s3queue.coordinator import Coordinator
from s3queue.errors import StorageError
from s3queue.events import Event, Listener
from s3queue.keys import QueueKeys
from s3queue.local.loader import Handlers, LocalQueue, load_handlers
from s3queue.service import FATAL, ServeResult, ServeSettings, serve
from s3queue.storage.base import Storage
from s3queue.tally import QueueTally, Tally
from s3queue.worker import Worker

log = logging.getLogger(__name__)

LOCAL_SERVE = ServeSettings(
    busy_interval=0.05, idle_interval=0.1, max_idle_interval=1.0, linger=None, reserve=0.0
)
"""Poll often (an idle queue is probed once a second: a first message starts within about a
second; against real S3 that is 60 LISTs a minute per queue), never end by itself."""
Progress = Callable[[dict[str, dict[str, int]]], None]
"""Receives ``{queue: {pending, delayed, in_flight, processed, retried, dead_lettered, dlq}}``."""


@dataclass
class RunSummary:
    """What `run_local` did, and the queues as it left them."""

    queues: dict[str, QueueTally]
    stats: dict[str, dict[str, Any]]
    dead_letters: dict[str, list[dict[str, Any]]]
    drained: bool
    elapsed: float
    serve: ServeResult | None
    errors: int = 0
    """Tickets whose processing raised (logged; the lease protocol redelivers them)."""


class LocalContext:
    """A Lambda context's remaining time; zero once the runtime stops, so work is released."""

    def __init__(self, timeout: float, stop: threading.Event) -> None:
        self._deadline = time.monotonic() + timeout
        self._stop = stop

    def get_remaining_time_in_millis(self) -> int:
        if self._stop.is_set():
            return 0
        return max(round((self._deadline - time.monotonic()) * 1000), 0)


class _StoppableClock(SystemClock):
    """The system clock whose waits end early when the runtime stops."""

    def __init__(self, stop: threading.Event) -> None:
        self._stop = stop

    def sleep(self, seconds: float) -> None:
        self._stop.wait(max(seconds, 0.0))


@dataclass
class _Pool:
    """The worker threads and the payloads handed to them."""

    payloads: queues.Queue[dict[str, Any] | None] = field(default_factory=queues.Queue)
    busy: int = 0
    errors: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def invoke(self, payload: dict[str, Any]) -> None:
        self.payloads.put(payload)

    def idle(self) -> bool:
        with self.lock:
            return self.busy == 0 and self.payloads.empty()


class _Runtime:
    """One `run_local` call: threads, the monitor loop and the summary."""

    def __init__(
        self,
        storage: Storage,
        handlers: dict[str, LocalQueue],
        *,
        prefix: str,
        workers: int,
        coordination: CoordinatorSettings,
        listener: Listener | None,
        stop: threading.Event,
    ) -> None:
        self.storage, self.handlers, self.prefix = storage, handlers, prefix
        self.stop = stop
        self.clock = _StoppableClock(stop)
        self.pool = _Pool()
        self.tally = Tally(list(handlers))
        self.listener = listener
        self.failure: BaseException | None = None
        self.serve_result: ServeResult | None = None
        self.coordinators = [
            Coordinator(
                storage,
                name,
                invoker=self.pool.invoke,
                prefix=prefix,
                settings=spec.settings,
                coordination=coordination,
                listener=listener,
            )
            for name, spec in handlers.items()
        ]
        self.workers = {
            name: Worker(
                storage,
                name,
                prefix=prefix,
                settings=spec.settings,
                coordination=coordination,
                listener=self._on_event,
                heartbeat_thread=True,
            )
            for name, spec in handlers.items()
        }
        self.threads = [
            threading.Thread(target=self._work, name=f"s3queue-worker-{i}", daemon=True)
            for i in range(max(workers, 1))
        ]
        self.threads.append(threading.Thread(target=self._serve, name="s3queue-serve", daemon=True))

    def _on_event(self, event: Event) -> None:
        self.tally(event)
        if self.listener is not None:
            self.listener(event)

    def _serve(self) -> None:
        try:
            self.serve_result = serve(
                self.coordinators,
                remaining_ms=lambda: sys.maxsize,
                clock=self.clock,
                settings=LOCAL_SERVE,
                stop=self.stop,
            )
        except Exception as exc:  # noqa: BLE001 - handed to the caller's thread, which raises it
            self.failure = exc
            self.stop.set()

    def _work(self) -> None:
        while (payload := self.pool.payloads.get()) is not None:
            with self.pool.lock:
                self.pool.busy += 1
            try:
                self._process(payload)
            finally:
                with self.pool.lock:
                    self.pool.busy -= 1

    def _process(self, payload: dict[str, Any]) -> None:
        name = str(payload.get("queue"))
        spec, worker = self.handlers.get(name), self.workers.get(name)
        if spec is None or worker is None:
            log.error("payload for unknown queue %r dropped", name)
            return
        context = LocalContext(spec.settings.timeout, self.stop)
        self.tally.begin(payload)
        try:
            worker.process(payload, spec.handler, remaining_ms=context.get_remaining_time_in_millis)
        except Exception:  # like a crashed Lambda: logged, counted, then redelivered by the lease
            log.exception("ticket %s failed", payload.get("ticket"))
            with self.pool.lock:
                self.pool.errors += 1

    def stats(self) -> dict[str, dict[str, Any]]:
        now = self.clock.now_ms()
        return {
            name: admin.stats(self.storage, QueueKeys(self.prefix, name), now)
            for name in self.handlers
        }

    def drained(self, stats: dict[str, dict[str, Any]]) -> bool:
        busy = ("pending", "delayed", "in_flight", "tickets")
        return self.pool.idle() and not any(s[k] for s in stats.values() for k in busy)

    def snapshot(self, stats: dict[str, dict[str, Any]]) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for name, s in stats.items():
            tally = self.tally.queues[name]
            out[name] = {
                "pending": s["pending"],
                "delayed": s["delayed"],
                "in_flight": s["in_flight"],
                "processed": tally.processed,
                "retried": tally.retried,
                "dead_lettered": tally.dead_lettered,
                "dlq": s["dead"],
            }
        return out

    def shutdown(self) -> None:
        self.stop.set()
        for _ in range(len(self.threads) - 1):
            self.pool.payloads.put(None)
        for thread in self.threads:
            thread.join()


def run_local(
    handlers: Handlers,
    *,
    bucket: str | None = None,
    s3: Any = None,
    storage: Storage | None = None,
    workers: int = 4,
    drain: bool = False,
    prefix: str = DEFAULT_PREFIX,
    overrides: Mapping[str, Any] | None = None,
    coordination: CoordinatorSettings | None = None,
    progress: Progress | None = None,
    progress_interval: float = 1.0,
    listener: Listener | None = None,
    stop: threading.Event | None = None,
    timeout: float | None = None,
) -> RunSummary:
    """Run every queue of `handlers` locally until `stop` is set, `timeout`, or (`drain`) empty.

    `handlers` is a folder of handler modules or ``{queue: callable}``; `overrides` replaces
    settings of every queue (e.g. ``{"backoff_base": 0.2}``). Storage is `storage`, or the
    `bucket` through the boto3 client `s3` (a default client if None). With `drain`, it
    returns once no queue has anything pending, delayed or in flight and no worker is busy.
    """
    loaded = load_handlers(handlers, overrides)
    if storage is None:
        storage = _s3_storage(bucket, s3)
    storage.list(f"{prefix}/", limit=1)  # fail fast: missing bucket, credentials, endpoint
    runtime = _Runtime(
        storage,
        loaded,
        prefix=prefix,
        workers=workers,
        coordination=coordination or CoordinatorSettings(),
        listener=listener,
        stop=stop or threading.Event(),
    )
    started = time.monotonic()
    for thread in runtime.threads:
        thread.start()
    try:
        drained = _monitor(runtime, drain, progress, progress_interval, timeout, started)
    finally:
        runtime.shutdown()
    if runtime.failure is not None:
        raise runtime.failure
    stats = runtime.stats()
    return RunSummary(
        queues=runtime.tally.queues,
        stats=stats,
        dead_letters={n: admin.dead_letters(storage, QueueKeys(prefix, n)) for n in loaded},
        drained=drained,
        elapsed=time.monotonic() - started,
        serve=runtime.serve_result,
        errors=runtime.pool.errors,
    )


def _monitor(
    runtime: _Runtime,
    drain: bool,
    progress: Progress | None,
    interval: float,
    timeout: float | None,
    started: float,
) -> bool:
    """Report progress and watch for the end; True once drained."""
    poll = min(interval, 0.25)
    reported = 0.0
    while not runtime.stop.wait(poll):
        now = time.monotonic()
        if timeout is not None and now - started >= timeout:
            return False
        report = progress is not None and now - reported >= interval
        if not (report or (drain and runtime.pool.idle())):
            continue
        try:
            stats = runtime.stats()
        except FATAL:
            raise
        except StorageError as exc:  # S3 trouble: the workers retry on their own; so do we
            log.warning("stats failed: %s", exc)
            continue
        if report and progress is not None:
            progress(runtime.snapshot(stats))
            reported = now
        if drain and runtime.drained(stats):
            if progress is not None:
                progress(runtime.snapshot(stats))
            return True
    return False


def _s3_storage(bucket: str | None, s3: Any) -> Storage:
    if not bucket:
        raise ValueError("run_local needs bucket= (or storage=)")
    from s3queue.storage.s3 import S3Storage, make_client  # noqa: PLC0415 - boto3 on demand

    return S3Storage(s3 if s3 is not None else make_client(), bucket)
