"""`Plan`: every size and duration of a benchmark run, in one frozen dataclass.

``DEFAULT`` is what ``make bench`` runs (about five minutes on a 2-core machine), ``QUICK`` a
one-minute pass of the same scenarios (``--quick``), ``SMOKE`` the seconds-long pass the
smoke test runs. Each scenario writes the parameters it used next to its results.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any


@dataclass(frozen=True)
class Plan:
    """Sizes and durations of one run."""

    # throughput
    messages: int = 2_000
    workers: tuple[int, ...] = (1, 4, 16)
    ceiling_seconds: float = 8.0
    # latency
    latency_workers: int = 4
    steady_rate: float = 5.0
    """Messages per second of the steady low-rate stream."""
    steady_seconds: float = 30.0
    backlog: int = 1_000
    """Messages enqueued at once (8 producer threads) while the runtime runs."""
    # idle
    idle_windows: tuple[float, ...] = (20.0, 5.0, 40.0)
    """Idle periods of the local runtime; each ends with one message (first-message latency)."""
    lambda_queues: int = 3
    # cost
    cost_single: int = 1_000
    cost_packed: int = 1_000
    pack_sizes: tuple[int, ...] = (10, 100, 1_000)
    # scale
    scale_backlogs: tuple[int, ...] = (1_000, 10_000, 100_000)
    scale_rounds: int = 4
    scale_in_flight: int = 8
    # cold start
    import_runs: int = 5
    # pool (several runtime processes on one queue)
    pool_messages: int = 1_200
    pool_processes: tuple[int, ...] = (1, 2, 3)
    pool_threads: int = 4
    failover_rounds: int = 3
    idle_worker_seconds: float = 30.0
    # hiding (the local runtime under AWS-like round trips, through bench.delay's proxy)
    hiding_messages: int = 8_000
    """Single enqueues per drain: a drain's fixed start and end (lease, first tick, first
    claims; the last applies) take about 1 s under AWS-like delays and 0.3 s without, so a
    drain of 8,000 (10-13 s) is mostly steady state, where 600 (under 1.5 s) was mostly start-up
    (docs/performance.md, "Under AWS-like round trips")."""
    hiding_packed: int = 100_000
    """Packed messages per drain: 10,000 drained in about 1 s, start-up included."""
    hiding_pack: int = 100
    """Messages per `enqueue_many` of the packed drains."""
    hiding_workers: int = 16
    hiding_rounds: int = 3
    """Pairs (no delay, AWS-like) per figure, run side by side: the spread of the ratios."""
    hiding_pool_messages: int = 8_000
    """Single enqueues per process drain: enough that the drain outlasts the processes' start
    (1-2 s each: interpreter, imports, the first tickets), so its rate is not mostly start-up."""
    hiding_threads: int = 4
    hiding_io_ms: int = 20
    """The processes' comparison again with a handler that waits this long (I/O, no CPU)."""
    hiding_io_messages: int = 4_000
    """Single enqueues per process drain with that handler: 20 s for one process of 4 threads."""
    # fairness (a small partition beside a big one's backlog)
    fairness_backlog: int = 5_000
    fairness_small: int = 40
    fairness_rate: float = 10.0
    fairness_workers: int = 8
    # payload (one file through enqueue_file and message.open(); 2 GiB: --payload-bytes)
    payload_bytes: int = 256 * 1024 * 1024
    # aws_sim (virtual seconds: the run's wall time is the code's CPU, not these)
    aws_sim_queues: tuple[int, ...] = (1, 2, 4)
    """Queues served by one coordinator function: the capacity curve's points."""
    aws_sim_single_offered: float = 3_000.0
    """Messages per second per queue offered by `enqueue` producers (above capacity)."""
    aws_sim_packed_offered: float = 20_000.0
    aws_sim_warmup: float = 8.0
    aws_sim_seconds: float = 15.0
    aws_sim_steady: float = 70.0
    """Virtual seconds of the steady run after its warm-up (more than a coordinator run)."""
    aws_sim_settings: str = ""
    """Queue settings for every aws_sim run, as ``name=value,...`` (default: the defaults)."""
    aws_sim_variants: tuple[str, ...] = (
        "concurrency=16",
        "concurrency=32",
        "concurrency=64",
        "max_batch_size=10",
        "chain=1",
        "packed:concurrency=32",
        "packed:concurrency=32,max_batch_size=2000",
    )
    """More capacity points, one queue, each with these settings on top; ``packed:`` first:
    `enqueue_many(100)`, else `enqueue`. ``chain=1``: tickets parked behind live ones
    (`QueueSettings.chain`), what the default slots deliver that way."""
    aws_sim_variant_offered: float = 3_200.0
    """`enqueue`s a second offered in the variants: just below what S3 takes on one prefix
    (3,500 writes/s, the queue's own writes included)."""
    aws_sim_packed_variant_offered: float = 100_000.0
    aws_sim_packed_variant_seconds: float = 5.0
    """The window of a ``packed:`` variant, after the usual warm-up (100,000 a second)."""
    aws_sim_cpu_scale: float = 1.0
    """Virtual seconds charged per second of this machine's CPU the simulated code spends on a
    whole vCPU (`Model.cpu_scale`); a function's container gets its memory's share of one."""
    aws_sim_overload_offered: float = 5_000.0
    """`enqueue`s a second offered on one queue, above S3's 3,500 writes/s per prefix."""
    aws_sim_overload_seconds: float = 14.0
    aws_sim_seeds: tuple[int, ...] = (1, 2, 3)
    """Issue 22's figures (simscale.py) are each the median of one run per seed, with spread."""
    aws_sim_shards: int = 8
    aws_sim_shards_offered: float = 12_000.0
    """Single `enqueue`s a second offered to the sharded queue, before and after the split."""
    aws_sim_shards_steady_offered: float = 10_500.0
    """...and after the split at a rate it keeps up with, drained: its cost per message."""
    aws_sim_shards_seconds: float = 16.0
    aws_sim_shards_warmup: float = 8.0
    """Handler starts of the sharded queue are counted from here (tickets grow meanwhile)."""
    aws_sim_idle_messages: int = 60
    aws_sim_idle_gap: float = 150.0
    """Virtual seconds between two messages after idle (the coordinator run ends in between)."""
    aws_sim_gc_offered: float = 4_000.0
    """Single `enqueue`s a second offered through one `Queue.batching()` (group commit)."""
    aws_sim_gc_callers: tuple[int, ...] = (64, 256, 512)
    """Concurrent callers sharing the batcher: one run per (callers, window)."""
    aws_sim_gc_windows: tuple[float, ...] = (0.05, 0.1)
    """The batcher's window, seconds."""
    aws_sim_gc_seconds: float = 20.0
    """Virtual seconds of offered load after the warm-up; then the queue drains."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


DEFAULT = Plan()
QUICK = replace(
    DEFAULT,
    messages=500,
    ceiling_seconds=3.0,
    steady_seconds=10.0,
    backlog=300,
    idle_windows=(6.0, 2.0),
    cost_single=200,
    scale_backlogs=(1_000, 10_000),
    scale_rounds=3,
    import_runs=3,
    pool_messages=400,
    failover_rounds=2,
    idle_worker_seconds=10.0,
    fairness_backlog=1_000,
    fairness_small=20,
    hiding_messages=2_000,
    hiding_packed=20_000,
    hiding_rounds=2,
    hiding_pool_messages=2_000,
    hiding_io_messages=1_000,
    payload_bytes=64 * 1024 * 1024,
    aws_sim_queues=(1,),
    aws_sim_seconds=10.0,
    aws_sim_variants=("concurrency=32", "packed:concurrency=32,max_batch_size=2000"),
    aws_sim_packed_variant_seconds=2.0,
    aws_sim_overload_seconds=8.0,
    aws_sim_seeds=(1, 2),
    aws_sim_shards_seconds=12.0,
    aws_sim_shards_warmup=6.0,
    aws_sim_idle_messages=8,
    aws_sim_gc_windows=(0.1,),
    aws_sim_gc_seconds=10.0,
)
SMOKE = replace(
    QUICK,
    messages=20,
    workers=(1, 4),
    ceiling_seconds=0.2,
    steady_rate=10.0,
    steady_seconds=1.0,
    backlog=30,
    idle_windows=(0.5,),
    lambda_queues=2,
    cost_single=10,
    cost_packed=100,
    pack_sizes=(100,),
    scale_backlogs=(100, 200),
    scale_rounds=2,
    scale_in_flight=2,
    import_runs=1,
    fairness_backlog=100,
    fairness_small=5,
    hiding_messages=20,
    hiding_packed=200,
    hiding_workers=4,
    hiding_rounds=1,
    hiding_pool_messages=20,
    hiding_io_messages=20,
    payload_bytes=12 * 1024 * 1024,
    aws_sim_queues=(1, 2),
    aws_sim_single_offered=100.0,
    aws_sim_packed_offered=1_000.0,
    aws_sim_warmup=3.0,
    aws_sim_seconds=3.0,
    aws_sim_steady=5.0,
    aws_sim_variants=("batch_size=20", "packed:concurrency=4"),
    aws_sim_variant_offered=1_000.0,  # a smoke run checks the code path, not the budget's edge
    aws_sim_packed_variant_offered=2_000.0,
    aws_sim_packed_variant_seconds=1.0,
    aws_sim_overload_offered=8_000.0,
    aws_sim_overload_seconds=1.5,
    aws_sim_seeds=(1,),
    aws_sim_shards=2,
    aws_sim_shards_offered=300.0,
    aws_sim_shards_steady_offered=100.0,
    aws_sim_shards_seconds=3.0,
    aws_sim_shards_warmup=1.0,
    aws_sim_idle_messages=2,
    aws_sim_idle_gap=90.0,
    aws_sim_gc_offered=200.0,
    aws_sim_gc_callers=(16,),
    aws_sim_gc_seconds=2.0,
)
