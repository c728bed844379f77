"""Hedged LISTs: a LIST that has not answered by the time most have is sent again, and the
first answer is used.

S3's latency has a long tail (AWS-FACTS; the S3 performance guidelines advise "tracking and
aggressively retrying slower operations"), and a coordinator's tick waits on its LISTs one
after the other (the tickets, then each folder's page), so one slow LIST delays every message
the tick dispatches. Dean and Barroso's hedged request ("The Tail at Scale", CACM 2013) cuts
that tail for a few per cent more requests: send the request again once it has been out longer
than the `QUANTILE` of recent ones, and take whichever answer comes first.

Why it is safe. A LIST changes nothing, so two in flight change nothing either. The answer
used is a snapshot S3 took within its own request's time, and the caller goes on only once it
holds one, so every order the protocol relies on ("the LIST of messages starts after the LIST
of tickets answered", coordinator.py) holds for whichever answer it was. The slower answer is
dropped when it comes.

The threshold follows what this process saw: the `QUANTILE` of the last `WINDOW` LISTs' own
durations (no hedge until `MIN_SAMPLES` are in, and never before `FLOOR_MS`), so it is some
tens of ms on AWS and a few ms on a local server. A hedge takes a thread of `submit`'s pool,
and so does every first attempt (the caller waits on it with a timeout): a pool of its own,
not one whose jobs LIST (a job waiting on a job of its own full pool waits forever).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any, BinaryIO

from s3queue.common.clock import Clock
from s3queue.common.concurrency import Pending, Submit, is_done, wait_any
from s3queue.storage.base import Head, Object, Page, Storage
from s3queue.storage.streams import Source

QUANTILE = 0.8
"""A LIST still out after this quantile of recent ones' durations is sent again: about one in
five, a fifth more LISTs for a LIST's tail from about 5x its median to about 3x."""
WINDOW = 200
"""Recent durations the threshold is taken from."""
MIN_SAMPLES = 20
FLOOR_MS = 5.0
THREADS = 32
"""The pool a coordinator's LISTs and their hedges run on: two for each of a tick's LISTs in
flight at once (its folders', at most `partitions_per_tick`, are read together)."""


class HedgedLists:
    """`storage` with its `list` hedged (every other call passed through unchanged)."""

    def __init__(self, storage: Storage, submit: Submit, clock: Clock) -> None:
        self.storage, self.submit, self.clock = storage, submit, clock
        self._recent: deque[float] = deque(maxlen=WINDOW)
        self._lock = threading.Lock()
        self.sent = 0
        """Second LISTs sent."""
        self.won = 0
        """Of those, how many answered first."""

    def list(self, prefix: str, *, start_after: str | None = None, limit: int = 1000) -> Page:
        def call() -> Page:
            began = self.clock.now_ms()
            page = self.storage.list(prefix, start_after=start_after, limit=limit)
            with self._lock:
                self._recent.append(float(self.clock.now_ms() - began))
            return page

        after = self.threshold_ms()
        if after is None:
            return call()
        first = self.submit(call)
        if wait_any([first], timeout_s=after / 1000):
            return _result(first)
        second = self.submit(call)
        with self._lock:
            self.sent += 1
        wait_any([first, second])
        if is_done(first):
            return _result(first, second)
        with self._lock:
            self.won += 1
        return _result(second, first)

    def threshold_ms(self) -> float | None:
        """How long a LIST may be out before it is sent again (None: too few seen yet)."""
        with self._lock:
            if len(self._recent) < MIN_SAMPLES:
                return None
            ordered = sorted(self._recent)
        return max(FLOOR_MS, ordered[int(QUANTILE * (len(ordered) - 1))])

    # -- the rest of `Storage`, unchanged ------------------------------------------------------

    def get(self, key: str, *, if_match: str | None = None) -> Object | None:
        return self.storage.get(key, if_match=if_match)

    def head(self, key: str) -> Head | None:
        return self.storage.head(key)

    def put(
        self,
        key: str,
        body: bytes,
        *,
        if_match: str | None = None,
        if_none_match: bool = False,
        token: str | None = None,
        metadata: Mapping[str, str] | None = None,
        resend_if: Callable[[], bool] | None = None,
    ) -> str:
        return self.storage.put(
            key,
            body,
            if_match=if_match,
            if_none_match=if_none_match,
            token=token,
            metadata=metadata,
            resend_if=resend_if,
        )

    def delete(self, key: str, *, if_match: str | None = None) -> None:
        self.storage.delete(key, if_match=if_match)

    def open(self, key: str, *, etag: str | None = None) -> BinaryIO | None:
        return self.storage.open(key, etag=etag)

    def put_file(self, key: str, source: Source) -> Head:
        return self.storage.put_file(key, source)

    def copy(self, source: str, dest: str, *, if_match: str | None, size: int) -> None:
        self.storage.copy(source, dest, if_match=if_match, size=size)

    def delete_many(
        self, keys: Iterable[str], *, if_match: Mapping[str, str] | None = None
    ) -> None:
        self.storage.delete_many(keys, if_match=if_match)

    def list_folders(self, prefix: str) -> tuple[str, ...]:
        return self.storage.list_folders(prefix)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.storage, name)


def _result(done: Pending, other: Pending | None = None) -> Page:
    """`done`'s page; if it raised and `other` is still out, `other`'s (which raises in turn if
    it fails too): a hedge that failed fast does not fail a LIST that would have answered."""
    try:
        page: Page = done.result()
    except Exception:
        if other is None:
            raise
        return _result(other)
    if other is not None:
        other.cancel()
    return page


def hedged(storage: Storage, submit: Submit | None, clock: Clock) -> Storage:
    """`storage` with hedged LISTs if `submit` is given, else `storage` itself."""
    return storage if submit is None else HedgedLists(storage, submit, clock)


__all__ = ["FLOOR_MS", "QUANTILE", "THREADS", "HedgedLists", "hedged"]
