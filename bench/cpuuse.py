"""`CpuWatch`: where a measured run's CPU went, so that a CPU-bound run says so.

A rate measured on a machine whose cores are all busy measures the machine, not the code's
waits: on a 2-core machine the S3 server (SeaweedFS), the delaying proxy and the runtime
compete for the same cores, and a ratio of two such rates says little about latency hiding.
So each run reports, over its window, the CPU of each process that takes part (as a share of
one core: 0.76 is 76 % of a core), and the machine's idle share from ``/proc/stat`` (every
core's idle and iowait time over all of their time), and a run with less than `BOUND_IDLE` of
the machine idle is marked CPU-bound.

Sources are callables giving a process's cumulative CPU seconds: `process_seconds` for a pid
(``/proc/<pid>/stat``, every thread of it), `time.process_time` for this process, or the
children's ``getrusage`` for child processes waited for before the window closes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

Source = Callable[[], float]
BOUND_IDLE = 0.15
"""Below this share of the machine idle over a run, the run is CPU-bound."""


def cpu_of(pid: int | None) -> float:
    """The CPU seconds (user + system) `pid` has used so far; 0 if it is unknown or gone."""
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_seconds(pid: int | None) -> Source:
    """A `Source` of `pid`'s CPU seconds so far (`cpu_of`)."""
    return partial(cpu_of, pid)


def machine_ticks() -> tuple[int, int]:
    """(idle + iowait, all) clock ticks of every core so far, from ``/proc/stat``; (0, 0) where
    there is no ``/proc``."""
    try:
        with open("/proc/stat") as stat:
            first = stat.readline().split()
    except OSError:
        return 0, 0
    ticks = [int(x) for x in first[1:]]
    return ticks[3] + ticks[4], sum(ticks[:8])  # guest time is counted in user already


class CpuWatch:
    """CPU of each named source and the machine's idle share between `start` and `stop`."""

    def __init__(
        self,
        sources: Mapping[str, Source],
        ticks: Callable[[], tuple[int, int]] = machine_ticks,
    ) -> None:
        self.sources = dict(sources)
        self.ticks = ticks
        self._wall = 0.0
        self._before: dict[str, float] = {}
        self._ticks = (0, 0)

    def start(self) -> CpuWatch:
        self._before = {name: read() for name, read in self.sources.items()}
        self._ticks = self.ticks()
        self._wall = time.monotonic()
        return self

    def stop(self) -> dict[str, Any]:
        """``cpu_s`` and ``cores`` (CPU over wall time) of each source, ``machine_idle`` (a
        share of all cores, None without /proc) and ``cpu_bound``."""
        wall = max(time.monotonic() - self._wall, 1e-6)
        used = {name: read() - self._before[name] for name, read in self.sources.items()}
        idle, total = (
            after - before for after, before in zip(self.ticks(), self._ticks, strict=True)
        )
        share = round(idle / total, 3) if total > 0 else None
        return {
            "seconds": round(wall, 2),
            "cpu_s": {name: round(seconds, 2) for name, seconds in used.items()},
            "cores": {name: round(seconds / wall, 2) for name, seconds in used.items()},
            "machine_idle": share,
            "cpu_bound": share is not None and share < BOUND_IDLE,
        }


def describe(use: Mapping[str, Any]) -> str:
    """One cell of a table: each source's cores, the machine's idle share, the verdict."""
    parts = [f"{name} {cores:.2f}" for name, cores in use["cores"].items()]
    idle = use.get("machine_idle")
    if idle is not None:
        parts.append(f"idle {idle:.0%}")
    return ", ".join(parts) + (" **CPU-bound**" if use.get("cpu_bound") else "")
