"""The shape of a chaos run: `Config`, and the settings of simulated and wall-clock runs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from s3queue.contract.settings import CoordinatorSettings, QueueSettings
from s3queue.dispatching.service import ServeSettings

from chaos import workload
from chaos.process import Drift, Hazards

SETTINGS = QueueSettings(
    visibility_timeout=20,
    max_retries=3,
    backoff_base=1.0,
    backoff_cap=8.0,
    batch_size=5,
    max_in_flight_tickets=8,
    max_message_bytes=64 * 1024,
    timeout=40,
)
"""Queue settings of a simulated run (simulated seconds cost nothing)."""
COORDINATION = CoordinatorSettings(
    lease_ttl=15, skew_tolerance=3, dispatch_timeout=10, sweep_interval=30
)
SERVING = ServeSettings(
    busy_interval=0.5,
    idle_interval=0.5,
    max_idle_interval=2,
    follow_interval=1,
    linger=None,
    release_after=20,
    reserve=5,
)
MIX = workload.Mix()
SCHEDULE = {"schedule": 5, "schedule_catch_up": 3}
"""A slot every 5 s, enqueued up to 3 s late (so a process that comes back later skips it)."""
REAL_SCHEDULE = {"schedule": 2, "schedule_catch_up": 1.5}
"""The same on the wall clock."""
NO_HAZARDS = Hazards()
SEAMS_MIX = workload.Mix(
    dedup=0.2,
    grouped=0.45,
    resend_ids=3.0,
    resend_rounds=12,
    dedup_fails=2,
    dedup_dies=0.2,
    redrives=0.3,
    files=0.1,
    batched=0.1,
    reputs=0.5,
    purges=0.5,
)
"""The seams steps of issue 19 (workload.py): explicit ids enqueued again at any time, that
fail, die and are redriven; enqueue_file and batching(); foreign keys PUT again; a purge mid-run
in half the runs."""
PRODUCER_HAZARDS = Hazards(crash_rate=0.02, freeze_rate=0.02, freeze_s=(0.5, 10))
"""A producer killed or frozen mid-enqueue: between a payload and its record, a marker and its
message, a redrive's steps."""

REAL_SETTINGS = QueueSettings(
    visibility_timeout=4,
    max_retries=2,
    backoff_base=0.2,
    backoff_cap=1.0,
    batch_size=5,
    max_in_flight_tickets=8,
    max_message_bytes=64 * 1024,
    timeout=8,
)
"""Queue settings of a run on the wall clock: short leases, so that recovery is quick."""
REAL_COORDINATION = CoordinatorSettings(
    # straggler_margin: a grouped PUT may land LANDING_MS (0.5 s) late without a late notice,
    # and producer and coordinator clocks differ by up to skew_ms (0.8 s) here
    lease_ttl=6,
    skew_tolerance=1,
    dispatch_timeout=4,
    sweep_interval=8,
    straggler_margin=1.5,
)
REAL_SERVING = ServeSettings(
    busy_interval=0.2,
    idle_interval=0.2,
    max_idle_interval=0.5,
    follow_interval=0.5,
    linger=None,
    release_after=5,
    reserve=1,
)
REAL_MIX = workload.Mix(slow=0.02, killer=0.0, ok_ms=(5, 60))
"""No Lambda-timeout killers on the wall clock (each costs a whole timeout): the simulation
covers them."""


def real_time(config: Config) -> Config:
    """The same run, with wall-clock settings (see REAL_SETTINGS)."""
    return config.with_(
        settings=REAL_SETTINGS,
        coordination=REAL_COORDINATION,
        serving=REAL_SERVING,
        mix=REAL_MIX,
        heartbeat_thread=True,
        run_s=20.0,
        spread_s=3.0,
        pause_s=(0.3, 1.0),
        schedule=REAL_SCHEDULE if config.schedule else {},
        max_s=240.0,
    )


@dataclass(frozen=True)
class Config:
    """Everything that shapes one run; the seed makes it reproducible."""

    seed: int = 1
    messages: int = 100
    workers: int = 4
    coordinators: int = 2
    pullers: int = 1
    """Worker processes that are never invoked: they list tickets and claim (s3queue worker)."""
    settings: QueueSettings = SETTINGS
    coordination: CoordinatorSettings = COORDINATION
    serving: ServeSettings = SERVING
    mix: workload.Mix = MIX
    faults: Mapping[str, float] = field(default_factory=dict)
    """Storage-level kinds for `run_sim`, S3 kinds for `run_cluster` (see faults.py)."""
    worker_hazards: Hazards = NO_HAZARDS
    coordinator_hazards: Hazards = NO_HAZARDS
    producer_hazards: Hazards = NO_HAZARDS
    """The producer crashes (a new process goes on) or freezes mid-enqueue: between a payload
    and its record, a marker and its message, a PUT and its late notice."""
    skew_ms: int = 0
    """Each actor's clock is off by a uniform amount in [-skew/2, +skew/2]."""
    apply_step: int = 0
    scan_page: int = 0
    """Keys a page of a cursor's scan of ``msg/`` holds (0: `cursor.PAGE`, 1,000): small, so
    that a run of 100 messages reads several pages a tick and its cursors go dense (a frontier,
    and the trailing page beside it), as a busy queue's do. A rewind's page stays 1,000."""
    """Refs an apply does between records of its progress (0: `apply.APPLY_STEP`): small,
    so that runs with a Lambda deadline cut applies of ordinary tickets short too."""
    drift: Drift = field(default_factory=Drift)
    """Each process's clock drifts by a uniform rate in [-ppm, +ppm] and steps as it says."""
    invoke_duplicate: float = 0.0
    invoke_lose: float = 0.0
    heartbeat_thread: bool = False
    run_s: float = 60.0
    spread_s: float = 30.0
    max_s: float = 3600.0
    pauses: int = 2
    """Times an operator pauses the queue while the producer runs (flow.py)."""
    pause_s: tuple[float, float] = (2.0, 12.0)
    """How long each pause lasts, drawn uniformly."""
    schedule: Mapping[str, Any] = field(default_factory=dict)
    """The queue's schedule as a handler's ``SETTINGS`` declares it (``SCHEDULE``; none if
    empty): the coordinators enqueue its slots while the producer runs (slots.py)."""
    shards: tuple[int, ...] = (1,)
    """The producer's ``shards`` (protocol/shards.py), one per process life in turn: with
    producer crashes, the layout changes while the queue runs."""
    chain: bool = False
    """Coordinators park tickets behind live ones once every slot is taken, and workers take
    them next (the Lambda functions' way: tickets.py `after`, working/start.py)."""
    sends: bool = False
    """Coordinators send their invokes, discoveries and pointer deletes from threads of their
    own, as the coordinator Lambda does (`send`): here run later, in a random order, when the
    run next asks its `RunAll` or at the run's end, and lost with the process in a crash."""

    def with_(self, **changes: Any) -> Config:
        return replace(self, **changes)
