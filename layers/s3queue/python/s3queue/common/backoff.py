"""Retry delays: exponential backoff with full jitter."""

from __future__ import annotations

import random


def backoff_bound(attempt: int, base: float, cap: float) -> float:
    """The largest delay after failed attempt `attempt` (1-based): min(cap, base * 2**(n-1))."""
    return float(min(cap, base * 2.0 ** min(max(attempt - 1, 0), 62)))


def compute_backoff(attempt: int, base: float, cap: float, rng: random.Random) -> float:
    """Seconds to wait before the next attempt: uniform in [0, backoff_bound] (full jitter)."""
    return rng.uniform(0.0, backoff_bound(attempt, base, cap))
