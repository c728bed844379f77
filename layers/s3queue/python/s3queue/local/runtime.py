"""`run_local`: the coordinator loop and a pool of worker threads in one process, on any S3.

The same code paths as on Lambda: `serve` over one `Coordinator` per queue, `Worker.process`
per ticket payload with a Lambda-like remaining time, and a local invoker (a queue of payloads)
for ``lambda:Invoke`` (threads share one worker per queue). Several runtimes on one bucket,
on any hosts, cooperate: each queue's lease decides which one dispatches; the leader hands a
ticket to its own pool only when a thread is free, and every runtime's pull loop (`pulling.py`)
claims the pending tickets it has threads for, so all of them run handlers. A runtime with
``coordinate=False`` only works (``s3queue worker``), beside one or more ``s3queue dev``.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from s3queue.common.clock import SystemClock
from s3queue.common.events import Event, Listener
from s3queue.common.tally import QueueTally, Tally
from s3queue.contract.settings import DEFAULT_PREFIX, CoordinatorSettings
from s3queue.dispatching.coordinator import Coordinator
from s3queue.dispatching.service import ServeResult, ServeSettings, serve
from s3queue.local.loader import Handlers, LocalQueue, load_handlers
from s3queue.local.monitor import Progress, reach, watch
from s3queue.local.pool import WorkerPool
from s3queue.local.pulling import PULL_READS, PullLoop
from s3queue.operations import admin
from s3queue.protocol.deadletters import DeadLetter
from s3queue.protocol.keys import QueueKeys
from s3queue.protocol.tickets import Invocation
from s3queue.storage.base import Storage
from s3queue.working.behind import ApplyBehind
from s3queue.working.readahead import read_lanes, read_pool
from s3queue.working.worker import Worker

log = logging.getLogger(__name__)

LOCAL_SERVE = ServeSettings(
    busy_interval=0.05,
    idle_interval=0.1,
    max_idle_interval=1.0,
    follow_interval=0.5,
    linger=None,
    reserve=0.0,
)
"""Poll often (an idle queue is probed once a second: a first message starts within about a
second; 60 LISTs a minute per queue against real S3), never end by itself."""
LOCAL_COORDINATION = CoordinatorSettings(lease_ttl=3.0, skew_tolerance=1.0)
"""A short leader lease: when a leader process dies, another runtime takes over about
`lease_ttl` (by S3's clock, plus up to 2 s of its one-second resolution) after its last renewal,
instead of 30 s. The price is one lease PUT a second per led queue."""


@dataclass
class RunSummary:
    """What `run_local` did, and the queues as it left them."""

    queues: dict[str, QueueTally]
    stats: dict[str, admin.Stats]
    dead_letters: dict[str, list[DeadLetter]]
    drained: bool
    elapsed: float
    serve: ServeResult | None
    errors: int = 0
    """Tickets whose processing raised (logged; the lease protocol redelivers them)."""


class LocalContext:
    """A Lambda context's remaining time: the queue's `timeout`, enforced by the worker as on
    Lambda (`s3queue.working.guard`); almost none once the runtime stops, so work is released."""

    def __init__(self, timeout: float, stop: threading.Event) -> None:
        self._deadline = time.monotonic() + timeout
        self._stop = stop

    def get_remaining_time_in_millis(self) -> int:
        left = max(round((self._deadline - time.monotonic()) * 1000), 0)
        # Stopping: 1 ms starts no handler, yet does not time out the one running (0 would).
        return min(left, 1) if self._stop.is_set() else left


class _StoppableClock(SystemClock):
    """The system clock whose waits end early when the runtime stops."""

    def __init__(self, stop: threading.Event) -> None:
        self._stop = stop

    def sleep(self, seconds: float) -> None:
        self._stop.wait(max(seconds, 0.0))


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
        coordinate: bool = True,
    ) -> None:
        self.storage, self.handlers, self.prefix = storage, handlers, prefix
        self.stop = stop
        self.clock = _StoppableClock(stop)
        self.pool = WorkerPool(self._process, workers)
        self.behind = ApplyBehind(workers)
        """Each thread's last committed ticket is applied while it takes the next (behind.py)."""
        self.pulling = PullLoop(
            storage, prefix, list(handlers), self.pool, stop, applying=self.behind.working
        )
        self.tally = Tally(list(handlers))
        self.listener = listener
        self.failure: BaseException | None = None
        self.serve_result: ServeResult | None = None
        self.tickets: dict[str, admin.TicketCache] = {name: {} for name in handlers}
        """Tickets read by the progress polls: each poll GETs only the ones that changed."""
        self.coordinators = [
            Coordinator(
                storage,
                name,
                invoker=self._offer,
                in_process=True,  # its workers are this process's threads
                prefix=prefix,
                settings=spec.settings,
                coordination=coordination,
                owner=f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}",
                listener=listener,
            )
            for name, spec in handlers.items()
            if coordinate
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
                behind=self.behind,
                read_ahead=read_pool(workers),
            )
            for name, spec in handlers.items()
        }
        self.server = threading.Thread(target=self._serve, name="s3queue-serve", daemon=True)
        self.puller = threading.Thread(target=self.pulling.run, name="s3queue-pull", daemon=True)

    def _offer(self, payload: Invocation) -> None:
        # Not taken (no thread free): it stays pending, for a pull loop elsewhere, or for this
        # one's next free thread, which takes it from memory (no LIST, no GET).
        if not self.pool.offer(payload):
            self.pulling.hold(payload)

    def _on_event(self, event: Event) -> None:
        self.tally(event)
        if self.listener is not None:
            self.listener(event)

    def _serve(self) -> None:
        if not self.coordinators:
            return  # a worker-only runtime
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

    def _process(self, payload: Invocation) -> None:
        name = str(payload.get("queue"))
        spec, worker = self.handlers.get(name), self.workers.get(name)
        if spec is None or worker is None:
            log.error("payload for unknown queue %r dropped", name)
            return
        remaining = LocalContext(spec.settings.timeout, self.stop).get_remaining_time_in_millis
        if worker.process(payload, spec.handler, remaining_ms=remaining).status in ("busy", "gone"):
            self.pulling.lost(name)  # another process took it first: the queue is contested

    def stats(self) -> dict[str, admin.Stats]:
        now = self.clock.now_ms()
        return {
            name: admin.stats(self.storage, QueueKeys(self.prefix, name), now, self.tickets[name])
            for name in self.handlers
        }

    def drained(self, stats: dict[str, admin.Stats]) -> bool:
        busy = [s["pending"] + s["delayed"] + s["in_flight"] + s["tickets"] for s in stats.values()]
        return self.pool.idle() and self.behind.idle() and not any(busy)

    def tickets_listed(self) -> bool:
        return self.pulling.tickets_listed()

    def snapshot(self, stats: dict[str, admin.Stats]) -> dict[str, dict[str, int]]:
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

    def start(self) -> None:
        self.pool.start()
        self.server.start()
        self.puller.start()

    def shutdown(self) -> None:
        self.stop.set()
        self.pool.freed.set()  # wake the pull loop: it sees the stop
        self.puller.join()
        self.pool.stop()
        self.behind.join()  # no process ends with an apply half done (behind.py)
        self.server.join()


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
    coordinate: bool = True,
) -> RunSummary:
    """Run every queue of `handlers` locally until `stop` is set, `timeout`, or (`drain`) empty.

    `handlers` is a folder of handler modules or ``{queue: callable}``; `overrides` replaces
    settings of every queue (e.g. ``{"backoff_base": 0.2}``). Storage is `storage`, or the
    `bucket` through the boto3 client `s3` (a default client if None). With `drain`, it
    returns once no queue has anything pending, delayed or in flight and no worker is busy.
    `coordination` defaults to `LOCAL_COORDINATION` (failover in seconds); with
    ``coordinate=False`` the runtime dispatches nothing and only works what others publish.
    """
    loaded = load_handlers(handlers, overrides)
    coordination = coordination or LOCAL_COORDINATION
    if storage is None:
        storage = _s3_storage(bucket, s3, connections(len(loaded), workers, coordination))
    stop = stop or threading.Event()
    # Fail fast on a missing bucket or credentials; an unreachable endpoint fails a drain (a
    # test, the demo) at once, and is waited for in a long run (dev): it may be starting.
    if not reach(storage, prefix, stop, wait=not drain):
        return _summary(storage, prefix, loaded, None, drained=False, elapsed=0.0)
    runtime = _Runtime(
        storage,
        loaded,
        prefix=prefix,
        workers=workers,
        coordination=coordination,
        listener=listener,
        stop=stop,
        coordinate=coordinate,
    )
    started = time.monotonic()
    runtime.start()
    try:
        drained = watch(runtime, drain, progress, progress_interval, timeout, started)
    finally:
        runtime.shutdown()
    if runtime.failure is not None:
        raise runtime.failure
    return _summary(storage, prefix, loaded, runtime, drained, time.monotonic() - started)


def _summary(
    storage: Storage,
    prefix: str,
    loaded: Mapping[str, LocalQueue],
    runtime: _Runtime | None,
    drained: bool,
    elapsed: float,
) -> RunSummary:
    """The queues as the run left them; empty if it was stopped before S3 ever answered."""
    if runtime is None:
        return RunSummary({}, {}, {}, drained=drained, elapsed=elapsed, serve=None)
    keys = {name: QueueKeys(prefix, name) for name in loaded}
    return RunSummary(
        queues=runtime.tally.queues,
        stats=runtime.stats(),
        dead_letters={n: admin.dead_letters(storage, k) for n, k in keys.items()},
        drained=drained,
        elapsed=elapsed,
        serve=runtime.serve_result,
        errors=runtime.pool.errors,
    )


def connections(queues: int, workers: int, coordination: CoordinatorSettings) -> int:
    """The S3 requests a runtime may have in flight at once: each queue's worker reads
    `read_lanes` objects ahead and its coordinator publishes `publish_concurrency` tickets at
    once, besides one request per worker thread and one per apply behind it (behind.py), and
    the pull loop's ticket reads (`PULL_READS`)."""
    per_queue = read_lanes(workers) + max(coordination.publish_concurrency, 1)
    return max(queues, 1) * per_queue + 2 * workers + PULL_READS


def _s3_storage(bucket: str | None, s3: Any, needed: int) -> Storage:
    """The bucket through `s3`, or through a client of ours with a pool of `needed`."""
    if not bucket:
        raise ValueError("run_local needs bucket= (or storage=)")
    from s3queue.storage.clients import make_client, pool_size  # noqa: PLC0415 - boto3 on demand
    from s3queue.storage.s3 import S3Storage  # noqa: PLC0415 - boto3 on demand

    if s3 is None:
        return S3Storage(make_client(max_pool_connections=needed), bucket)
    size = pool_size(s3)
    if size is not None and size < needed:
        log.warning(
            "the S3 client given to run_local keeps %d connections, but this runtime makes up "
            "to %d requests at once: each request past the pool opens a new connection (a TLS "
            "handshake on AWS). Pass s3=make_client() (s3queue.storage.clients), or a client "
            "made with botocore.config.Config(max_pool_connections=%d).",
            size,
            needed,
            needed,
        )
    return S3Storage(s3, bucket)
