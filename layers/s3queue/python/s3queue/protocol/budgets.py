"""Rate-limit counters: the handler starts taken so far in the current one-second window.

    <prefix>/<queue>/budgets/~queue          {"v":1,"token":...,"window":<ms>,"used":<n>}
    <prefix>/<queue>/budgets/<partition>     the same, for one partition's limit

A worker takes starts from a counter before it claims a rate-limited ticket (and again when
its ticket outlasts the window): a GET, then a CAS (``If-Match``, ``If-None-Match`` the first
time) that adds what it takes to ``used``, never beyond the limit. A window is one second of
the taker's clock, aligned to its seconds; a counter of an older window counts from 0 again.
Concurrent takers race on the ETag, so the starts of one window add up to at most the limit
whoever takes them. A counter whose window is ahead of the taker's clock (another worker's
clock is fast) is kept: the taker waits for that window rather than reset a count in use,
unless it is more than `AHEAD_MS` ahead (a clock that is simply wrong).

Starts that are taken and never made are budget lost, never exceeded: `give_back` returns
them (best effort) when a claim is lost after the take.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from s3queue.errors import Conflict
from s3queue.storage.base import Storage, new_token

VERSION = 1
WINDOW_MS = 1000
AHEAD_MS = 10_000
"""A counter further ahead of the taker's clock than this is taken for a wrong clock's."""
WRITE_ATTEMPTS = 8
"""CAS rounds a take makes against concurrent takers before it gives up (`Conflict`)."""


def window_of(now_ms: int) -> int:
    return now_ms - now_ms % WINDOW_MS


@dataclass(frozen=True, slots=True)
class Count:
    """A counter's content: `used` starts taken in the window starting at `window_ms`."""

    window_ms: int = 0
    used: int = 0

    def encode(self, token: str) -> bytes:
        doc: dict[str, Any] = {
            "v": VERSION,
            "token": token,
            "window": self.window_ms,
            "used": self.used,
        }
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> Count:
        """The count a stored body says; an unreadable one counts as a fresh window."""
        try:
            doc = json.loads(data)
            return cls(int(doc["window"]), int(doc["used"]))
        except (ValueError, KeyError, TypeError):
            return cls()


@dataclass(frozen=True, slots=True)
class Grant:
    """Starts taken from a counter: `starts` of the window at `window_ms` (0: it is spent;
    try again at `window_ms` + `WINDOW_MS`)."""

    window_ms: int
    starts: int

    def covers(self, now_ms: int) -> bool:
        return self.window_ms <= now_ms < self.window_ms + WINDOW_MS


def take(storage: Storage, key: str, limit: int, want: int, now_ms: int) -> Grant:
    """Up to `want` starts of the window at `now_ms` (or of a later one the counter is already
    in: the caller waits for it), by CAS; none if that window is spent."""
    for _ in range(WRITE_ATTEMPTS):
        obj = storage.get(key)
        window = window_of(now_ms)
        count = Count(window)
        if obj is not None:
            stored = Count.decode(obj.body)
            if stored.window_ms == window or window < stored.window_ms <= window + AHEAD_MS:
                count = stored
        starts = min(want, limit - count.used)
        if starts <= 0:
            return Grant(count.window_ms, 0)
        token = new_token()
        wanted = Count(count.window_ms, count.used + starts)
        etag = None if obj is None else obj.etag
        try:
            storage.put(
                key, wanted.encode(token), if_match=etag, if_none_match=etag is None, token=token
            )
        except Conflict:  # another taker wrote in between: read theirs and try again
            continue
        return Grant(count.window_ms, starts)
    raise Conflict(f"{key}: taken by others {WRITE_ATTEMPTS} times in a row")


def give_back(storage: Storage, key: str, grant: Grant, starts: int) -> None:
    """Return `starts` of `grant` never made, if its window is still the counter's (one
    attempt: losing a race here only loses budget)."""
    if starts <= 0:
        return
    obj = storage.get(key)
    if obj is None:
        return
    stored = Count.decode(obj.body)
    if stored.window_ms != grant.window_ms:
        return
    token = new_token()
    back = Count(stored.window_ms, max(stored.used - starts, 0))
    try:
        storage.put(key, back.encode(token), if_match=obj.etag, token=token)
    except Conflict:
        return
