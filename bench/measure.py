"""Small measuring tools shared by the scenarios: percentiles, load, request counts, enqueuing."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from s3queue.local.metering import RequestCounter
from s3queue.producing.producer import Queue

BILLED = ("PUT", "GET", "HEAD", "LIST", "DELETE", "POST")
"""The request kinds reported (OTHER is never seen in these runs)."""


def percentile(values: Sequence[float], q: float) -> float:
    """The `q`-th percentile (0..100) by linear interpolation between closest ranks."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summarize_ms(values: Sequence[float]) -> dict[str, float]:
    """Count, p50, p95, p99, max and mean of millisecond samples."""
    if not values:
        return {"count": 0}
    return {
        "count": len(values),
        "p50": round(percentile(values, 50), 1),
        "p95": round(percentile(values, 95), 1),
        "p99": round(percentile(values, 99), 1),
        "max": round(max(values), 1),
        "mean": round(sum(values) / len(values), 1),
    }


def load() -> list[float]:
    """The 1, 5 and 15 minute load averages (other engineers share this machine)."""
    return [round(x, 2) for x in os.getloadavg()]


def billed(counts: dict[str, int]) -> dict[str, int]:
    """Request counts of the billed kinds only."""
    return {kind: counts.get(kind, 0) for kind in BILLED}


def per_message(counts: dict[str, int], messages: int) -> dict[str, float]:
    """Requests per message, kind by kind, and their total."""
    out = {kind: round(counts.get(kind, 0) / messages, 4) for kind in BILLED}
    out["total"] = round(sum(counts.get(kind, 0) for kind in BILLED) / messages, 4)
    return out


class Meter:
    """One boto3 client and the counter of every request it sends."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.counter = RequestCounter.attach(client)

    def reset(self) -> None:
        self.counter.reset()

    def counts(self) -> dict[str, int]:
        return billed(self.counter.counts())

    def total(self) -> int:
        return sum(self.counts().values())


def enqueue_all(queue: Queue, count: int, *, threads: int = 8) -> tuple[list[str], float]:
    """Enqueue `count` small messages one by one (one PUT each) from threads; ids and seconds."""
    started = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        ids = list(pool.map(lambda n: queue.enqueue({"n": n}), range(count)))
    return ids, time.monotonic() - started
