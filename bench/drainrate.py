"""A drain's rates: from its start to its end, and in its steady middle (issue 22, item 4).

A drain's wall rate counts what happens once however long the drain: the leader's lease, the
first tick, the first claims, a process's interpreter start-up and imports, and at the end
the last tickets' tail and the ``--drain`` checks. Under AWS-like delays that fixed part is
longer (each of those steps waits on S3), so a short drain's ratio of rates with and without
delays measures start-up more than throughput. The steady rate leaves both ends out: it runs
from the moment `LOW` of the messages had finished to the moment `HIGH` had, whichever
process finished them (``handler_finish`` times, by the system clock, comparable across the
processes of one machine). Both are reported; neither replaces the other.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

LOW, HIGH = 0.1, 0.9
"""The middle of a drain: from its 10th to its 90th percentile of handler finishes."""


def steady_rate(finishes_ms: Iterable[int]) -> dict[str, Any]:
    """Messages per second between the `LOW` and `HIGH` shares of `finishes_ms` (ms, any
    order); None when too few finished to tell (under 10, or all within one millisecond)."""
    times = sorted(finishes_ms)
    if len(times) < 10:
        return {"steady_seconds": None, "steady_messages_per_s": None}
    low, high = round(LOW * (len(times) - 1)), round(HIGH * (len(times) - 1))
    span = (times[high] - times[low]) / 1000
    if span <= 0:
        return {"steady_seconds": None, "steady_messages_per_s": None}
    return {
        "steady_seconds": round(span, 2),
        "steady_messages_per_s": round((high - low) / span, 1),
    }


def processes(times: list[dict[str, Any]]) -> dict[str, Any]:
    """The steady rate of several processes draining one queue (each one's ``finishes_ms``,
    noted by `bench.hidingchild`), and when each handled its first message, from its start."""
    return {
        **steady_rate(ms for t in times for ms in t.get("finishes_ms") or ()),
        "first_handler_s": [
            round((t["first_start_ms"] - t["process_start_ms"]) / 1000, 2)
            if t.get("first_start_ms")
            else None
            for t in times
        ],
        "handled": [t.get("handled", 0) for t in times],
    }
