"""Hiding: the local runtime with AWS-like round trips to S3 (issue 22, items 4 and 5).

Every drain goes through the delaying proxy (`bench.delay`), with AWS-like delays (30 ms a
write, 20 ms a GET, 50 ms a LIST) or none, in turn (A, B, A, B...), so both sides pay the
proxy's own cost and see the same machine; the ratio of each pair is the share of its rate the
runtime keeps once S3 is as far away as on AWS. Requests are counted at the proxy.

- **Drains**: `hiding_workers` (16) worker threads of one `run_local` drain `hiding_messages`
  single enqueues, and `hiding_packed` messages enqueued `hiding_pack` at a time
  (`enqueue_many`), with a handler that does nothing. The producers write directly to the
  server, before the runtime starts. Also reported: the runtime process's CPU (user + system,
  `time.process_time`) per message and per S3 call over the drain.
- **Processes**: under AWS-like delays, one ``s3queue dev --drain`` alone, then one with two
  ``s3queue worker --drain`` beside it (`hiding_threads` threads each), drain
  `hiding_pool_messages` single enqueues with a handler that does nothing: messages per
  second from the start of the processes to the last one's exit (imports included), and the
  steady rate (`bench.drainrate`; `bench.hidingchild` notes the finishes), requests per
  message (the drain checks of ``--drain`` included), and the children's CPU (the proxy's not
  included). Then the same with a handler that waits `hiding_io_ms` on I/O
  (`hiding_io_messages` each): with nothing to do, one process already takes most of this
  machine's two cores beside the S3 server and the proxy, so only a handler that waits shows
  whether processes add up when CPU is not the limit (the issue's premise).

Every run reports both rates, from start to end and steady (the middle of the drain,
`bench.drainrate`), and both ratios; and where the CPU went (`bench.cpuuse`): the runtime's,
the proxy's and the S3 server's, each as a share of a core, and the machine's idle share, so
a run that the machine's cores limited says so.
"""

from __future__ import annotations

import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from s3queue.local.seaweed import ANY_CREDENTIALS
from s3queue.producing.producer import Queue
from s3queue.storage.clients import make_client
from s3queue.storage.s3 import S3Storage

from bench.cpuuse import CpuWatch, Source, process_seconds
from bench.delay import AWS_LIKE, NO_DELAY, DelayProxy, Delays
from bench.drainrate import processes as steady_of_processes
from bench.drainrate import steady_rate
from bench.local import LocalRun, Tracker, noop
from bench.measure import enqueue_all, load, per_message
from bench.plan import Plan
from bench.pool import _env
from bench.progress import Progress
from bench.target import Space, Target

QUEUE = "hiding"
HANDLER = "SETTINGS = {}\n\n\ndef handle(message):\n    pass\n"
WAITING = "import time\n\nSETTINGS = {{}}\n\n\ndef handle(message):\n    time.sleep({s})\n"
"""A handler that waits on I/O (`hiding_io_ms`) and uses no CPU: the processes' comparison
where this machine's two cores are not the limit."""
Report = Callable[[float, str], None]


def run(target: Target, plan: Plan, progress: Progress) -> dict[str, Any]:
    if not target.embedded:
        return {"skipped": "needs the embedded server: the delays model AWS's own round trips"}
    steps = 4 * plan.hiding_rounds + 4 * plan.hiding_rounds
    done = [0]

    def step(detail: str) -> None:
        progress.update(done[0] / steps, detail)
        done[0] += 1

    drains = {kind: _pairs(target, plan, kind, step) for kind in ("single", "packed")}
    processes = _processes(target, plan, step, HANDLER, plan.hiding_pool_messages)
    waiting = WAITING.format(s=plan.hiding_io_ms / 1000)
    io = _processes(target, plan, step, waiting, plan.hiding_io_messages)
    progress.update(1.0)
    return {
        "params": {
            "delays": AWS_LIKE.describe(),
            "workers": plan.hiding_workers,
            "rounds": plan.hiding_rounds,
            "single": plan.hiding_messages,
            "packed": f"{plan.hiding_packed} messages, enqueue_many({plan.hiding_pack})",
            "handler": "does nothing",
            "baseline": "the same proxy with no delay (both sides pay its CPU)",
        },
        "drains": drains,
        "processes": processes,
        "processes_io": {"handler_ms": plan.hiding_io_ms, **io},
    }


def _spread(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


def _ratios(runs: list[dict[str, Any]], rate: str) -> list[float]:
    """`rate` of each second run over the first's, pair by pair (pairs without it left out)."""
    return [
        second[rate] / first[rate]
        for first, second in zip(runs[::2], runs[1::2], strict=True)
        if first.get(rate) and second.get(rate)
    ]


def _usage(target: Target, proxy: DelayProxy, runtime: Source) -> CpuWatch:
    """Where a run's CPU goes: the runtime, the proxy, the S3 server (`bench.cpuuse`)."""
    return CpuWatch(
        {"runtime": runtime, "proxy": proxy.cpu_seconds, "S3": process_seconds(target.server_pid)}
    )


def _pairs(target: Target, plan: Plan, kind: str, step: Callable[[str], None]) -> dict[str, Any]:
    """`hiding_rounds` pairs of drains, without and with delays, side by side."""
    runs: list[dict[str, Any]] = []
    for round_ in range(plan.hiding_rounds):
        for name, delays in (("none", NO_DELAY), ("aws", AWS_LIKE)):
            step(f"{kind} drain {round_ + 1}/{plan.hiding_rounds}, delays {name}")
            runs.append({"delays": name, **drain(target, plan, kind, delays)})
    ratios = _ratios(runs, "messages_per_s")
    steady = _ratios(runs, "steady_messages_per_s")
    return {
        "runs": runs,
        "ratio": _spread(ratios),
        "ratios": [round(r, 3) for r in ratios],
        "steady_ratio": _spread(steady or [0.0]),
        "steady_ratios": [round(r, 3) for r in steady],
        "cpu_ms_per_message": {
            name: _spread([r["cpu_ms_per_message"] for r in runs if r["delays"] == name])
            for name in ("none", "aws")
        },
    }


def drain(target: Target, plan: Plan, kind: str, delays: Delays) -> dict[str, Any]:
    """Enqueue (directly), then drain through the proxy with `delays`; rate, requests, CPU."""
    space = target.space(f"hiding-{kind}")
    producer = Queue(QUEUE, storage=S3Storage(target.client(), space.bucket), prefix=space.prefix)
    messages = plan.hiding_messages if kind == "single" else plan.hiding_packed
    if kind == "single":
        enqueue_all(producer, messages)
    else:
        for start in range(0, messages, plan.hiding_pack):
            producer.enqueue_many([{"n": n} for n in range(start, start + plan.hiding_pack)])
    with DelayProxy(target.endpoint_url, delays) as proxy:
        return _drain_through(
            proxy, _usage(target, proxy, time.process_time), space, plan, messages
        )


def _drain_through(
    proxy: DelayProxy, usage: CpuWatch, space: Space, plan: Plan, messages: int
) -> dict[str, Any]:
    workers = plan.hiding_workers
    client = make_client(proxy.url, credentials=ANY_CREDENTIALS, max_pool_connections=64 + workers)
    tracker = Tracker()
    tracker.expect(messages)
    storage = S3Storage(client, space.bucket)
    run = LocalRun(storage, QUEUE, noop, prefix=space.prefix, workers=workers, listener=tracker)
    proxy.counts(reset=True)
    usage.start()
    with run.running():
        complete = tracker.wait(timeout=60 + messages / 5)
        seconds = time.monotonic() - run.started
        used = usage.stop()
        counts = proxy.counts()
    cpu = used["cpu_s"]["runtime"]
    if not complete:
        raise RuntimeError(f"hiding: {tracker.finished}/{messages} handled before the timeout")
    calls = sum(counts.values())
    return {
        "messages": messages,
        "seconds": round(seconds, 2),
        "messages_per_s": round(messages / seconds, 1),
        **steady_rate(tracker.finishes_ms),
        "tickets": len(tracker.applied),
        "requests": counts,
        "per_message": per_message(counts, messages),
        "cpu_seconds": round(cpu, 2),
        "cpu_ms_per_message": round(cpu * 1000 / messages, 3),
        "cpu_ms_per_call": round(cpu * 1000 / max(calls, 1), 3),
        "cpu": used,
        "load": load(),
    }


def _processes(
    target: Target, plan: Plan, step: Callable[[str], None], handler: str, messages: int
) -> dict[str, Any]:
    """1 ``dev`` against 1 ``dev`` + 2 ``worker``, under AWS-like delays, side by side, the
    queue's handler module `handler`, `messages` single enqueues each."""
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as folder:
        handlers = Path(folder) / "handlers"
        handlers.mkdir()
        (handlers / f"{QUEUE}.py").write_text(handler)
        for round_ in range(plan.hiding_rounds):
            for count in (1, 3):
                step(f"{count} process(es) under delays, {round_ + 1}/{plan.hiding_rounds}")
                runs.append(_pool_drain(target, plan, handlers, count, messages))
    ratios = _ratios(runs, "messages_per_s")
    return {
        "runs": runs,
        "ratio_three_to_one": _spread(ratios),
        "ratios": [round(r, 3) for r in ratios],
        "steady_ratio_three_to_one": _spread(_ratios(runs, "steady_messages_per_s") or [0.0]),
        "requests_per_message": {
            str(n): _spread([r["per_message"]["total"] for r in runs if r["processes"] == n])
            for n in (1, 3)
        },
    }


def _pool_drain(
    target: Target, plan: Plan, handlers: Path, processes: int, messages: int
) -> dict[str, Any]:
    space = target.space(f"hiding-pool{processes}")
    producer = Queue(QUEUE, storage=S3Storage(target.client(), space.bucket), prefix=space.prefix)
    enqueue_all(producer, messages)
    threads = plan.hiding_threads
    with DelayProxy(target.endpoint_url, AWS_LIKE) as proxy, tempfile.TemporaryDirectory() as tmp:
        outs = [Path(tmp) / f"{n}.json" for n in range(processes)]
        proxy.counts(reset=True)
        usage = _usage(target, proxy, _children_seconds).start()
        started = time.monotonic()
        procs = [
            _spawn(target, proxy.url, space, handlers, threads, out, "dev" if n == 0 else "worker")
            for n, out in enumerate(outs)
        ]
        codes = [p.wait() for p in procs]
        elapsed = time.monotonic() - started
        # Before the proxy's exit: its CPU is a child's too, and not the runtime's.
        used = usage.stop()
        counts = proxy.counts()
        times = [json.loads(out.read_text()) if out.exists() else {} for out in outs]
    cpu = used["cpu_s"]["runtime"]
    if any(codes):
        print(f"hiding: exit codes {codes}", file=sys.stderr)
    steady = steady_of_processes(times)
    return {
        "processes": processes,
        "threads_each": threads,
        "messages": messages,
        "seconds": round(elapsed, 2),
        "messages_per_s": round(messages / elapsed, 1),
        **steady,
        "requests": counts,
        "per_message": per_message(counts, messages),
        "cpu_ms_per_message": round(cpu * 1000 / messages, 3),
        "cpu": used,
        "exit_codes": codes,
        "load": load(),
    }


def _children_seconds() -> float:
    """CPU of this process's children that have exited and been waited for (the runtimes)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _spawn(
    target: Target, url: str, space: Space, handlers: Path, threads: int, out: Path, role: str
) -> subprocess.Popen[bytes]:
    """``s3queue <role> --drain`` on `space` through the proxy at `url`; when its handlers ran,
    written to `out` (`bench.hidingchild`)."""
    command = [sys.executable, "-m", "bench.hidingchild", str(out), "--endpoint-url", url]
    command += ["--bucket", space.bucket, "--prefix", space.prefix, role, "--drain"]
    command += ["--handlers", str(handlers), "--workers", str(threads)]
    return subprocess.Popen(
        command,
        env=_env(target),
        cwd=Path(__file__).resolve().parents[1],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
