"""The `Storage` protocol and the records it returns."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import BinaryIO, Protocol

from s3queue.errors import Conflict, Consumed, StorageError
from s3queue.storage.streams import Source


class _Tokens:
    """Write tokens: 64 random bits drawn per process, and a counter.

    A forked child must not share its parent's tokens (two processes that both take a won
    race for their own write would both lead, or both claim): the random part is drawn again
    in every child, at fork (`os.register_at_fork`), so processes forked after import (gunicorn
    ``--preload``, Celery prefork, ``multiprocessing``) draw their own. Threads share one
    counter, whose ``next`` is atomic.
    """

    def __init__(self) -> None:
        self.redraw()

    def redraw(self) -> None:
        self.process = os.urandom(8).hex()
        self.counter = itertools.count()

    def new(self) -> str:
        return f"{self.process}-{next(self.counter)}"


_tokens = _Tokens()
os.register_at_fork(after_in_child=_tokens.redraw)


def new_token() -> str:
    """A token unique to one write: across threads, processes (forked ones too) and hosts."""
    return _tokens.new()


@dataclass(frozen=True, slots=True)
class Object:
    """An object's bytes and version."""

    key: str
    body: bytes
    etag: str
    last_modified_ms: int
    metadata: dict[str, str] = field(default_factory=dict)
    """Its user metadata (``x-amz-meta-*``, names lowercased), the writer's token left out."""
    served_ms: int = 0
    """S3's own time when it answered (the response's ``Date``); 0 if unknown."""


@dataclass(frozen=True, slots=True)
class Head:
    """An object's version and the token of the write that made it."""

    etag: str
    token: str | None
    metadata: dict[str, str] = field(default_factory=dict)
    """As `Object.metadata`."""
    size: int = 0
    last_modified_ms: int = 0
    served_ms: int = 0
    """As `Object.served_ms`."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One key of a listing."""

    key: str
    etag: str
    size: int
    last_modified_ms: int
    served_ms: int = 0
    """S3's own time when it answered the LIST (its ``Date``); 0 if unknown."""


S3_TIME_RESOLUTION_MS = 1000
"""``Last-Modified`` and ``Date`` count whole seconds."""


def written_ago(last_modified_ms: int, served_ms: int, now_ms: int) -> int:
    """How long ago an object was last written, at least: by S3's own clock (its answer's
    ``Date`` minus the object's ``Last-Modified``, less a second for their resolution) when the
    answer said, else by the reader's clock. A writer's clock never enters it, so a holder whose
    clock runs fast cannot keep a lease alive longer than its TTL of S3 time (issue 19.7)."""
    if served_ms:
        return served_ms - last_modified_ms - S3_TIME_RESOLUTION_MS
    return now_ms - last_modified_ms


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a listing; `truncated` means more keys follow the last one."""

    entries: list[Entry]
    truncated: bool


class Storage(Protocol):
    """Atomic single-key operations on one bucket (see the package docstring)."""

    def get(self, key: str, *, if_match: str | None = None) -> Object | None:
        """The object, or None if it does not exist. With `if_match`, `Conflict` if it is
        another version (If-Match): a reader of one listed version never reads the next."""
        ...

    def head(self, key: str) -> Head | None:
        """The object's ETag, writer token, metadata and size, or None if it does not exist."""
        ...

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
        """Write the object and return its new ETag; `Conflict` if a condition failed.

        `metadata` becomes the object's user metadata (what another service's PUT may carry);
        the library's own documents keep everything in their bodies. `resend_if`, for a create
        (`if_none_match` with a `token`): asked before the create is sent again after a failure
        that may have applied, once the object is found missing or written by another; False
        raises `Consumed` (it may have applied and been consumed or written over since: a
        resend could create it a second time)."""
        ...

    def delete(self, key: str, *, if_match: str | None = None) -> None:
        """Delete the object; missing is fine, a changed ETag is `Conflict`."""
        ...

    def open(self, key: str, *, etag: str | None = None) -> BinaryIO | None:
        """A readable binary stream of the object, fetched as it is read (a streamed GET that
        a dropped connection resumes with a ranged one); None if it does not exist. With
        `etag`, `Conflict` if the object is another version (If-Match)."""
        ...

    def put_file(self, key: str, source: Source) -> Head:
        """Write an object from a path or a readable binary file without holding it in memory
        (multipart above a threshold): unconditional, for keys nobody else writes. Its head."""
        ...

    def copy(self, source: str, dest: str, *, if_match: str | None, size: int) -> None:
        """Server-side copy of `source`, if still at version `if_match` (None: any), to `dest`
        (overwritten; `size` picks one CopyObject or a multipart copy); `Conflict` if the source
        is gone or another version. No byte passes through this process."""
        ...

    def delete_many(
        self, keys: Iterable[str], *, if_match: Mapping[str, str] | None = None
    ) -> None:
        """Delete up to 1,000 keys in one request; missing keys are fine. A key `if_match` maps
        to an ETag is deleted only at that version (the ETag in DeleteObjects): another version
        is left in place, silently (it is another object to its caller)."""
        ...

    def list(self, prefix: str, *, start_after: str | None = None, limit: int = 1000) -> Page:
        """Up to `limit` (at most 1,000) keys under `prefix` after `start_after`, in order."""
        ...

    def list_folders(self, prefix: str) -> tuple[str, ...]:
        """The folders directly under `prefix` (``prefix + name + "/"``), in order: a LIST
        with delimiter ``/``, one request per 1,000 keys and folders."""
        ...


def settle_put_conflict(
    storage: Storage, key: str, *, token: str | None, if_match: str | None, if_none_match: bool
) -> str:
    """After a conditional PUT answered Conflict, what really happened.

    - The object carries our token: our write applied and only its response was lost (the
      retry saw our own write). Return its ETag: success.
    - The condition still holds (the key is still missing, or still at `if_match`): nothing was
      written and nothing changed, as after a 409 ConditionalRequestConflict. `StorageError`:
      try again later; never "someone else won", which would be a lie.
    - Otherwise the condition really failed: `Conflict`.
    """
    head = storage.head(key)
    if head is not None and token is not None and head.token == token:
        return head.etag
    if (if_none_match and head is None) or (
        if_match is not None and head is not None and head.etag == if_match
    ):
        raise StorageError(f"conditional PUT of {key} was refused but its condition holds")
    raise Conflict(f"{key}: precondition failed")


def recheck_create(
    storage: Storage, key: str, token: str, resend_if: Callable[[], bool] | None
) -> str | None:
    """After a create (`if_none_match` with `token`) that failed and may have applied: its
    ETag if the object is ours; None if it may be sent again. Missing, it may never have
    applied, or applied and been consumed since (the HEAD came late); written by another, ours
    may have applied and been written over (a claim), and be deleted before a resend lands: a
    writer that can tell (`resend_if` False) gets `Consumed` instead of a second creation."""
    head = storage.head(key)
    if head is not None and head.token == token:
        return head.etag
    if resend_if is not None and not resend_if():
        state = "consumed" if head is None else "written over"
        raise Consumed(f"{key} was created and {state} already: not created again")
    return None


def settle_delete_conflict(storage: Storage, key: str, if_match: str) -> None:
    """After a conditional DELETE answered Conflict: gone is success, unchanged is a
    `StorageError` (nothing happened, try again), changed is a real `Conflict`."""
    head = storage.head(key)
    if head is None:
        return
    if head.etag == if_match:
        raise StorageError(f"conditional DELETE of {key} was refused but its condition holds")
    raise Conflict(f"{key} changed")


def iter_keys(storage: Storage, prefix: str, after: str | None = None) -> Iterator[Entry]:
    """Every entry under a prefix whose key sorts after `after` (None: all), page by page."""
    start = after
    while True:
        page = storage.list(prefix, start_after=start)
        yield from page.entries
        if not page.truncated or not page.entries:
            return
        start = page.entries[-1].key
