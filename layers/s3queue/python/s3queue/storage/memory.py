"""`MemoryStorage`: the storage semantics of S3, in memory, for fast deterministic tests."""

from __future__ import annotations

import bisect
import hashlib
import io
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import BinaryIO

from s3queue.common.clock import Clock, SystemClock
from s3queue.errors import Conflict
from s3queue.storage.base import Entry, Head, Object, Page, settle_put_conflict
from s3queue.storage.streams import Source


@dataclass(slots=True)
class _Stored:
    body: bytes
    etag: str
    token: str | None
    modified_ms: int
    metadata: dict[str, str]


class MemoryStorage:
    """Thread-safe: every call holds one lock, so each is atomic like a single S3 request.

    ETags are MD5 digests of the body, as in S3, so identical bodies share an ETag: callers put
    a token in every body they CAS.
    """

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock = clock or SystemClock()
        self._objects: dict[str, _Stored] = {}
        self._keys: list[str] = []
        self._lock = threading.Lock()

    @property
    def server_clock(self) -> Clock:
        """S3's time here: the store's own clock (it stamps Last-Modified and answers Date)."""
        return self._clock

    def get(self, key: str, *, if_match: str | None = None) -> Object | None:
        with self._lock:
            stored = self._objects.get(key)
            if stored is None:
                return None
            if if_match is not None and stored.etag != if_match:
                raise Conflict(f"{key} changed")
            meta, served = dict(stored.metadata), self._clock.now_ms()
            return Object(key, stored.body, stored.etag, stored.modified_ms, meta, served)

    def head(self, key: str) -> Head | None:
        with self._lock:
            stored = self._objects.get(key)
            if stored is None:
                return None
            return Head(
                stored.etag,
                stored.token,
                dict(stored.metadata),
                len(stored.body),
                stored.modified_ms,
                self._clock.now_ms(),
            )

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
        meta = {k.lower(): v for k, v in (metadata or {}).items()}  # as S3 stores them
        try:
            return self._put(key, body, if_match, if_none_match, token, meta)
        except Conflict:
            return settle_put_conflict(
                self, key, token=token, if_match=if_match, if_none_match=if_none_match
            )

    def _put(
        self,
        key: str,
        body: bytes,
        if_match: str | None,
        if_none_match: bool,
        token: str | None,
        metadata: dict[str, str],
    ) -> str:
        with self._lock:
            current = self._objects.get(key)
            if if_none_match and current is not None:
                raise Conflict(f"{key} exists")
            if if_match is not None and (current is None or current.etag != if_match):
                raise Conflict(f"{key} changed")
            etag = hashlib.md5(body, usedforsecurity=False).hexdigest()
            if current is None:
                bisect.insort(self._keys, key)
            self._objects[key] = _Stored(body, etag, token, self._clock.now_ms(), metadata)
            return etag

    def delete(self, key: str, *, if_match: str | None = None) -> None:
        with self._lock:
            current = self._objects.get(key)
            if current is None:
                return
            if if_match is not None and current.etag != if_match:
                raise Conflict(f"{key} changed")
            self._remove(key)

    def open(self, key: str, *, etag: str | None = None) -> BinaryIO | None:
        with self._lock:
            stored = self._objects.get(key)
            if stored is None:
                return None
            if etag is not None and stored.etag != etag:
                raise Conflict(f"{key} changed")
            return io.BytesIO(stored.body)

    def put_file(self, key: str, source: Source) -> Head:
        if isinstance(source, str | os.PathLike):
            with open(source, "rb") as stream:
                body = stream.read()
        else:
            body = source.read()
        self.put(key, body)
        head = self.head(key)
        assert head is not None
        return head

    def copy(self, source: str, dest: str, *, if_match: str | None, size: int) -> None:
        with self._lock:
            stored = self._objects.get(source)
            if stored is None or if_match not in (None, stored.etag):
                raise Conflict(f"copy source {source} is gone or changed")
        self.put(dest, stored.body)

    def delete_many(
        self, keys: Iterable[str], *, if_match: Mapping[str, str] | None = None
    ) -> None:
        versions = if_match or {}
        with self._lock:
            for key in keys:
                stored = self._objects.get(key)
                if stored is not None and versions.get(key, stored.etag) == stored.etag:
                    self._remove(key)

    def _remove(self, key: str) -> None:
        del self._objects[key]
        self._keys.pop(bisect.bisect_left(self._keys, key))

    def list(self, prefix: str, *, start_after: str | None = None, limit: int = 1000) -> Page:
        limit = min(limit, 1000)
        with self._lock:
            served = self._clock.now_ms()
            index = bisect.bisect_left(self._keys, prefix)
            if start_after is not None:
                index = max(index, bisect.bisect_right(self._keys, start_after))
            entries: list[Entry] = []
            while index < len(self._keys) and self._keys[index].startswith(prefix):
                if len(entries) == limit:
                    return Page(entries, truncated=True)
                key = self._keys[index]
                stored = self._objects[key]
                entries.append(
                    Entry(key, stored.etag, len(stored.body), stored.modified_ms, served)
                )
                index += 1
            return Page(entries, truncated=False)

    def list_folders(self, prefix: str) -> tuple[str, ...]:
        with self._lock:
            index = bisect.bisect_left(self._keys, prefix)
            folders: list[str] = []
            while index < len(self._keys) and self._keys[index].startswith(prefix):
                name, slash, _ = self._keys[index][len(prefix) :].partition("/")
                if slash:
                    folders.append(f"{prefix}{name}/")
                    # every key of this folder sorts below its name + the highest character
                    index = bisect.bisect_left(self._keys, f"{prefix}{name}/\U0010ffff", index)
                else:
                    index += 1
            return tuple(folders)
