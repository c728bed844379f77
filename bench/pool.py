"""Pool: several runtime processes on one queue (throughput by process count, leader failover,
idle cost of a worker process).

- **Scaling**: for 1, 2 and 3 processes (one ``s3queue dev`` and the rest ``s3queue worker``,
  each with `pool_threads` threads), `pool_messages` single messages whose handler sleeps 50 ms
  (I/O-bound) are enqueued, then the processes drain them: messages per second from the
  processes' start to the last one's exit, and the ratio to one process.
- **Failover**: two ``s3queue dev`` share a queue fed 20 messages a second; the leader (the
  lease's owner) is killed with SIGKILL; the time until a ticket of a new epoch exists is
  measured, `failover_rounds` times (with the local runtime's defaults: lease 3 s, skew 1 s).
- **Idle worker**: one worker-only runtime (`run_local(coordinate=False)`) on an empty queue
  for `idle_worker_seconds`, its S3 requests counted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from s3queue.errors import S3QueueError
from s3queue.local.metering import RequestCounter
from s3queue.local.runtime import run_local
from s3queue.producing.producer import Queue
from s3queue.storage.s3 import S3Storage

from bench.plan import Plan
from bench.progress import Progress
from bench.target import Space, Target

QUEUE = "pool"
WAIT = 120.0
"""Seconds any wait of this scenario gives up after (a failed scenario, not a hung bench)."""
HANDLER = """
import time

SETTINGS = {"batch_size": 10, "max_in_flight_tickets": 64, "visibility_timeout": 10}


def handle(message):
    time.sleep(0.05)
"""


def run(target: Target, plan: Plan, progress: Progress) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        handlers = Path(folder) / "handlers"
        handlers.mkdir()
        (handlers / f"{QUEUE}.py").write_text(HANDLER)
        scaling = [
            _drain(target, plan, handlers, n, progress, i / 5)
            for i, n in enumerate(plan.pool_processes)
        ]
        base = scaling[0]["messages_per_s"]
        for point in scaling:
            point["ratio_to_one"] = round(point["messages_per_s"] / base, 2)
        failover = _failover(target, plan, handlers, progress)
    idle = _idle_worker(target, plan)
    progress.update(1.0)
    return {"scaling": scaling, "failover": failover, "idle_worker": idle}


def _env(target: Target) -> dict[str, str]:
    return {**os.environ, "AWS_ACCESS_KEY_ID": "s3queue", "AWS_SECRET_ACCESS_KEY": "s3queue-secret"}


def _spawn(
    target: Target, space: Space, handlers: Path, threads: int, *args: str
) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "s3queue.local.cli", "--endpoint-url", target.endpoint_url]
    command += ["--bucket", space.bucket, "--prefix", space.prefix, *args]
    command += ["--handlers", str(handlers), "--workers", str(threads)]
    return subprocess.Popen(
        command, env=_env(target), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def _enqueue(queue: Queue, count: int) -> None:
    """`count` single enqueues from 8 threads (one PUT each)."""
    threads = [
        threading.Thread(target=lambda k=k: [queue.enqueue({"n": i}) for i in range(k, count, 8)])
        for k in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _drain(
    target: Target, plan: Plan, handlers: Path, processes: int, progress: Progress, at: float
) -> dict[str, Any]:
    progress.update(at, f"{processes} process(es)")
    space = target.space(f"pool-{processes}")
    queue = Queue(QUEUE, storage=S3Storage(target.client(), space.bucket), prefix=space.prefix)
    _enqueue(queue, plan.pool_messages)
    started = time.monotonic()
    threads = plan.pool_threads
    procs = [_spawn(target, space, handlers, threads, "dev", "--drain")]
    procs += [
        _spawn(target, space, handlers, threads, "worker", "--drain") for _ in range(processes - 1)
    ]
    codes = [p.wait() for p in procs]
    elapsed = time.monotonic() - started
    return {
        "processes": processes,
        "threads_each": plan.pool_threads,
        "messages": plan.pool_messages,
        "seconds": round(elapsed, 2),
        "messages_per_s": round(plan.pool_messages / elapsed, 1),
        "exit_codes": codes,
    }


def _failover(target: Target, plan: Plan, handlers: Path, progress: Progress) -> dict[str, Any]:
    space = target.space("pool-failover")
    storage = S3Storage(target.client(), space.bucket)
    queue = Queue(QUEUE, storage=storage, prefix=space.prefix)
    stop = threading.Event()

    def feed() -> None:
        while not stop.is_set():
            try:
                queue.enqueue({"t": time.time()})
            except S3QueueError as exc:  # a slow or failing S3 must not end the feed
                print(f"pool: enqueue failed: {exc}", file=sys.stderr)
            stop.wait(0.05)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    procs = [_spawn(target, space, handlers, plan.pool_threads, "dev") for _ in range(2)]
    times: list[float] = []
    try:
        for round_ in range(plan.failover_rounds):
            progress.update(0.6 + 0.3 * round_ / plan.failover_rounds, "failover")
            times.append(
                _kill_leader(
                    storage,
                    queue,
                    procs,
                    lambda: _spawn(target, space, handlers, plan.pool_threads, "dev"),
                )
            )
    finally:
        stop.set()
        feeder.join()
        for proc in procs:
            proc.terminate()  # SIGTERM: a clean stop, as a container's
        for proc in procs:
            try:
                proc.wait(timeout=WAIT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    ordered = sorted(times)
    return {
        "rounds": len(times),
        "seconds": [round(t, 2) for t in times],
        "p50": round(ordered[len(ordered) // 2], 2),
        "max": round(ordered[-1], 2),
    }


def _kill_leader(
    storage: S3Storage,
    queue: Queue,
    procs: list[subprocess.Popen[bytes]],
    respawn: Callable[[], subprocess.Popen[bytes]],
) -> float:
    """Kill the lease's owner; seconds until a ticket of a later epoch is published."""
    lease = _lease_when_led(storage, queue, {p.pid for p in procs})
    victim = next(p for p in procs if str(p.pid) == lease["owner"].split(":")[1])
    killed = time.monotonic()
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    deadline = killed + WAIT
    while time.monotonic() < deadline:
        epochs = {
            int(e.key.rsplit("/", 1)[1].split("-")[0])
            for e in storage.list(queue.keys.tickets).entries
        }
        if any(epoch > lease["epoch"] for epoch in epochs):
            break
        time.sleep(0.02)
    else:
        raise RuntimeError(f"no ticket of a new epoch {WAIT:g} s after the leader was killed")
    elapsed = time.monotonic() - killed
    procs[procs.index(victim)] = respawn()
    return elapsed


def _lease_when_led(storage: S3Storage, queue: Queue, pids: set[int]) -> dict[str, Any]:
    """The lease once one of `pids` holds it and has published a ticket in its epoch."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        obj = storage.get(queue.keys.lease)
        if obj is not None:
            lease = json.loads(obj.body)
            owner = str(lease.get("owner") or "")
            mine = owner.count(":") >= 2 and int(owner.split(":")[1]) in pids
            tickets = storage.list(queue.keys.tickets).entries
            head = f"{lease['epoch']:010d}-"
            published = any(e.key.rsplit("/", 1)[1].startswith(head) for e in tickets)
            if mine and published and lease.get("lease_until", 0) > 0:
                return lease
        time.sleep(0.05)
    raise RuntimeError(f"no process led the queue and published within {WAIT:g} s")


def _idle_worker(target: Target, plan: Plan) -> dict[str, Any]:
    space = target.space("pool-idle")
    client = target.client()
    counter = RequestCounter.attach(client)
    stop = threading.Event()
    timer = threading.Timer(plan.idle_worker_seconds, stop.set)
    timer.start()
    run_local(
        {QUEUE: lambda message: None},
        storage=S3Storage(client, space.bucket),
        prefix=space.prefix,
        coordinate=False,
        stop=stop,
    )
    counts = counter.counts()
    total = sum(counts.values())
    return {
        "seconds": plan.idle_worker_seconds,
        "requests": counts,
        "requests_per_minute": round(total * 60 / plan.idle_worker_seconds, 1),
    }
