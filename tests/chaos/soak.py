"""``make chaos``: a long chaos run with random seeds, a progress line and a results table.

    python tests/chaos/soak.py [--backend memory|seaweed] [--messages 5000] [--workers 8]
                               [--coordinators 3] [--profile everything] [--seed N] [--runs N]
    python -m tests.chaos.soak ...   (the same)

``memory`` runs the deterministic simulation (simulated time; exact replay from the seed);
``seaweed`` runs real threads against an embedded SeaweedFS (or ``--endpoint``) with network
faults injected into every client (the seed replays the fault mix, not the interleaving). The
exit status is 1 if any run broke a guarantee; the table names the seed to replay it with.
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for `chaos.*`

from chaos.configs import PRODUCER_HAZARDS, SCHEDULE, SEAMS_MIX, SETTINGS, Config, real_time
from chaos.history import Entry
from chaos.process import Drift, Hazards
from chaos.scenario import Result, run_cluster, run_sim

EVERYTHING: dict[str, Any] = {
    "faults": {
        "error_before": 0.01,
        "error_after": 0.005,
        "lost_response": 0.01,
        "conflict409": 0.002,
        "latency": 0.05,
        "zombie": 0.01,
    },
    "worker_hazards": Hazards(crash_rate=0.01, freeze_rate=0.005, freeze_s=(5, 60)),
    "coordinator_hazards": Hazards(crash_rate=0.005, freeze_rate=0.005, freeze_s=(5, 40)),
    "skew_ms": 3_000,
    "invoke_duplicate": 0.05,
    "invoke_lose": 0.02,
}
PROFILES: dict[str, dict[str, Any]] = {
    "quiet": {},
    "everything": {
        **EVERYTHING,
        "mix": SEAMS_MIX,
        "producer_hazards": PRODUCER_HAZARDS,
        "schedule": SCHEDULE,
    },
    "shards": {
        # `everything`, with ungrouped messages spread over shards; a producer crash changes
        # their number (4, then 1, 8, 2, ...) while the queue runs
        **EVERYTHING,
        "mix": SEAMS_MIX,
        "producer_hazards": PRODUCER_HAZARDS,
        "shards": (4, 1, 8, 2),
    },
    "chained": {
        # `everything`, with two slots: tickets parked behind live ones, taken by the
        # workers that finish those (the Lambda functions' way)
        **EVERYTHING,
        "mix": SEAMS_MIX,
        "producer_hazards": PRODUCER_HAZARDS,
        "chain": True,
        "settings": replace(SETTINGS, max_in_flight_tickets=2),
    },
    "clocks": {
        # every fault of `everything`, and clocks that drift and step within the bounds
        # (docs/guarantees.md: a leader within 1.5 s of S3's time: 0.5 s of offset, 0.5 s steps,
        # 100 ppm over an hour), applies cut short by the Lambda deadline, larger tickets
        **EVERYTHING,
        "skew_ms": 1_000,
        "drift": Drift(ppm=100, step_rate=0.0005, step_ms=500),
        "apply_step": 3,
        "settings": replace(SETTINGS, batch_size=20),
        "schedule": SCHEDULE,
    },
    "clocks-beyond": {
        # the same with clocks 20 s apart, drifting 2 %, stepping by up to 10 minutes: the
        # run states which guarantee degrades; nothing may be lost
        **EVERYTHING,
        "skew_ms": 20_000,
        "drift": Drift(ppm=20_000, step_rate=0.0005, step_ms=600_000),
        "apply_step": 3,
        "settings": replace(SETTINGS, batch_size=20),
        "schedule": SCHEDULE,
    },
    "stale-listing": {
        # opt-in: an S3-compatible store whose LIST omits keys written in the last 2 s
        "faults": {**EVERYTHING["faults"], "stale_list": 0.2},
        "worker_hazards": EVERYTHING["worker_hazards"],
    },
    "network": {
        "faults": {
            "error500": 0.02,
            "slowdown503": 0.02,
            "conflict409": 0.002,
            "latency": 0.05,
            "reset": 0.02,
            "lost_response": 0.02,
        },
        "worker_hazards": Hazards(crash_rate=0.005),
        "coordinator_hazards": Hazards(crash_rate=0.002),
        "skew_ms": 800,
        "schedule": SCHEDULE,  # every 2 s on the wall clock (configs.REAL_SCHEDULE)
    },
}
"""Fault mixes. ``everything`` is for the simulation (storage-level faults, freezes of up to a
minute); ``network`` for SeaweedFS (the S3 faults of a real client, wall-clock scale)."""


class Progress:
    """A history watcher printing one status line every `every` seconds (wall clock)."""

    def __init__(self, every: float = 2.0) -> None:
        self.every, self.next = every, time.monotonic() + every
        self.total: int | None = None
        self.terminal: set[str] = set()
        self.faults = 0
        self.start = time.monotonic()
        self.first_ms: int | None = None

    def __call__(self, e: Entry) -> None:
        self.first_ms = e.true_ms if self.first_ms is None else self.first_ms
        if e.kind == "producer_done":
            self.total = int(e["total"])
        elif e.kind == "ticket_write" and e["state"] == "committed":
            self.terminal |= {str(i) for i, k in e["outcomes"] if k in ("done", "dead")}
        elif e.kind in ("fault", "crash", "freeze"):
            self.faults += 1
        if time.monotonic() >= self.next:
            self.next = time.monotonic() + self.every
            queue_s = (e.true_ms - self.first_ms) / 1000
            total = self.total if self.total is not None else "?"
            print(
                f"  {time.monotonic() - self.start:6.0f}s  {len(self.terminal)}/{total} "
                f"finished, {self.faults} faults, queue time {queue_s:.0f}s",
                file=sys.stderr,
                flush=True,
            )


def run(args: argparse.Namespace, seed: int) -> Result:
    base = Config(
        seed=seed,
        messages=args.messages,
        workers=args.workers,
        coordinators=args.coordinators,
        max_s=args.max_s,
    ).with_(**PROFILES[args.profile])
    progress = Progress()
    if args.backend == "memory":
        return run_sim(base, watch=progress)
    config = real_time(base).with_(max_s=args.max_s, spread_s=max(3.0, args.messages / 50))
    return _seaweed(config, args.endpoint, progress)


def _seaweed(config: Config, endpoint: str | None, progress: Progress) -> Result:
    from s3queue.local.seaweed import EmbeddedS3
    from s3queue.storage.clients import make_client

    bucket = f"chaos-{config.seed}-{random.randrange(10**6)}"
    if endpoint is not None:
        make_client(endpoint).create_bucket(Bucket=bucket)
        return run_cluster(config, lambda: make_client(endpoint), bucket, watch=progress)
    with EmbeddedS3(buckets=[bucket]) as server:
        return run_cluster(config, server.make_client, bucket, watch=progress)


def table(result: Result, command: str) -> str:
    """The results of one run, as Markdown."""
    r, c = result.report, result.report.counts
    lateness = sorted(r.lateness_ms)
    lost = sum(1 for v in r.violations if v.invariant == "lost")
    unexplained = sum(1 for v in r.violations if v.invariant == "unexplained_duplicate")
    time_kind = "simulated" if result.sim_s else "wall-clock"
    simulated = f", {result.sim_s:.0f} s simulated" if result.sim_s else ""
    lines = [
        f"`{command}`",
        "",
        "| messages | completed | DLQ | lost | duplicate executions (explained + not) "
        f"| violations | p50 / p99 lateness ({time_kind}) | run time |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        f"| {c['messages']} | {c['completed']} | {c['dead']} | {lost} "
        f"| {len(r.redeliveries)} + {unexplained} | {len(r.violations)} "
        f"| {_pct(lateness, 0.5)} / {_pct(lateness, 0.99)} s "
        f"| {result.wall_s:.0f} s wall{simulated} |",
        "",
        "| dead letters, by reason | count |",
        "| --- | ---: |",
        *(f"| {why} | {n} |" for why, n in _dead_reasons(result).most_common()),
        "",
        "| fault injected | count |",
        "| --- | ---: |",
        *(f"| {kind} | {n} |" for kind, n in sorted(result.faults.items())),
        "",
        "| duplicate execution, explained by | count |",
        "| --- | ---: |",
        *(f"| {why} | {n} |" for why, n in _causes(result).most_common()),
    ]
    if r.violations:
        lines += ["", "| violated invariant | count | first example |", "| --- | ---: | --- |"]
        lines += [f"| {inv} | {n} | {ex} |" for inv, n, ex in _violations(result)]
    return "\n".join(lines)


def _pct(values: list[int], q: float) -> str:
    return f"{values[min(int(len(values) * q), len(values) - 1)] / 1000:.1f}" if values else "-"


def _dead_reasons(result: Result) -> Counter[str]:
    reasons: Counter[str] = Counter()
    for letter in result.final.dead:
        reason = str(letter.get("reason", ""))
        if reason.startswith("delivered "):
            reasons["delivery limit: its leases kept expiring (crashes, timeouts)"] += 1
        elif reason.startswith("MalformedMessage"):
            reasons["malformed or oversized object"] += 1
        elif reason.startswith("PermanentError"):
            reasons["PermanentError"] += 1
        else:
            reasons["handler failed max_retries + 1 times"] += 1
    return reasons


def _causes(result: Result) -> Counter[str]:
    return Counter(d.reason for d in result.report.redeliveries)


def _violations(result: Result) -> list[tuple[str, int, str]]:
    first: dict[str, str] = {}
    counts: Counter[str] = Counter()
    for v in result.report.violations:
        counts[v.invariant] += 1
        first.setdefault(v.invariant, f"{v.subject}: {v.detail}"[:160].replace("|", "/"))
    return [(inv, n, first[inv]) for inv, n in counts.most_common()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("memory", "seaweed"), default="memory")
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--coordinators", type=int, default=3)
    parser.add_argument("--profile", choices=sorted(PROFILES), default=None)
    parser.add_argument("--seed", type=int, default=None, help="default: a random one")
    parser.add_argument("--runs", type=int, default=1, help="runs, each with its own seed")
    parser.add_argument("--endpoint", default=None, help="an S3 endpoint instead of SeaweedFS")
    parser.add_argument("--max-s", type=float, default=7200.0, help="give up after (s)")
    parser.add_argument("--history", default=None, help="write a failed run's history here")
    args = parser.parse_args(argv)
    # Injected S3 errors are logged as warnings by the service: the progress line says enough.
    logging.getLogger("s3queue").setLevel(logging.ERROR)
    args.profile = args.profile or ("everything" if args.backend == "memory" else "network")
    failed = []
    for i in range(args.runs):
        seed = args.seed + i if args.seed is not None else random.randrange(1, 10**9)
        command = _command(args, seed)
        print(f"chaos run {i + 1}/{args.runs}: {command}", file=sys.stderr, flush=True)
        result = run(args, seed)
        print(table(result, command) + "\n", flush=True)
        if not (result.finished and result.report.ok):
            failed.append(command)
            if args.history:
                result.history.dump(args.history)
    for command in failed:
        print(f"FAILED: replay with `{command}`")
    return 1 if failed else 0


def _command(args: argparse.Namespace, seed: int) -> str:
    return (
        f"python tests/chaos/soak.py --backend {args.backend} --profile {args.profile} "
        f"--messages {args.messages} --workers {args.workers} "
        f"--coordinators {args.coordinators} --seed {seed}"
    )


if __name__ == "__main__":
    sys.exit(main())
