"""S3 faults, injected between a boto3 client and a real S3 server, and the same at `Storage` level.

Why a botocore event hook rather than a loopback proxy. A ``before-send`` handler sees every
HTTP attempt of one client, after signing and before the wire, and may answer it itself:

- it is per client, so one process can give each actor (worker, coordinator) its own faults,
  which a proxy in front of the one server could only do by port;
- it sees the operation name (``PutObject``) and the request's conditional headers without
  parsing HTTP, so a 409 goes only to conditional writes and a lost response only to writes;
- it runs below the SDK's retry loop, so every injected fault goes through the same retries
  (botocore's standard mode, then `S3Storage`'s own) as a real one;
- it costs no extra process, port or hop: on 2 shared cores, a Python proxy would double the
  CPU per request, which is already the bottleneck (20-35 ms per call).

What it cannot do that a proxy could: cut a connection halfway through a response body, or
delay a request that the server has started applying. The faults below are the ones the guarantees
name: 500 InternalError, 503 SlowDown, 409 ConditionalRequestConflict, added latency, a
connection reset before the request is sent, and a *lost response*: the request is sent and
applied, then the connection resets, so the SDK's retry of a conditional write sees 412 and
`S3Storage` must recognise its own write by its token.

Reproducibility. Fault decisions come from ``random.Random(f"{seed}:{n}")`` for the n-th request
through one injector: the same seed gives the same sequence of decisions. With several threads
the order in which requests take the numbers varies, so a threaded run replays the same fault
mix, not the same interleaving; the deterministic simulation (`sim.py`) replays exactly.

`StorageFaults` injects what those faults look like above `S3Storage` (after its retries) into
any `Storage`, for the fast in-memory runs: an error before or after the write applied, a lost
response recognised by token, and a 409 that persisted past every retry, which the storage layer
settles (`settle_put_conflict`): a `StorageError` while the write's condition still holds.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, BinaryIO
from urllib.parse import unquote

from botocore.awsrequest import AWSResponse
from botocore.exceptions import ConnectionClosedError
from botocore.httpsession import URLLib3Session
from s3queue.errors import Conflict, StorageError
from s3queue.storage.base import (
    Head,
    Object,
    Page,
    Storage,
    recheck_create,
    settle_delete_conflict,
    settle_put_conflict,
)
from s3queue.storage.streams import Source

from chaos.history import History

S3_KINDS = ("error500", "slowdown503", "conflict409", "latency", "reset", "lost_response")
STORAGE_KINDS = (
    "error_before",
    "error_after",
    "lost_response",
    "conflict409",
    "latency",
    "stale_list",
    "zombie",
)
ZOMBIE_S = (0.05, 20.0)
"""How long after its client gave up a ``zombie`` write lands, drawn uniformly (S3's time): up
to longer than a leader's lease and a claim's visibility timeout in the chaos settings, so a
new leader may have taken over, and far below ``tombstone_ttl`` (docs/guarantees.md)."""
STALE_LIST_MS = 2_000
"""A ``stale_list`` LIST leaves out the keys written less than this long ago (S3's time): an
S3-compatible store without strongly consistent listing (an opt-in profile, issue 19)."""
_WRITES = frozenset({"PutObject", "DeleteObject", "DeleteObjects", "CopyObject"})
_ERRORS = {
    "error500": (500, "InternalError", "We encountered an internal error. Please try again."),
    "slowdown503": (503, "SlowDown", "Please reduce your request rate."),
    "conflict409": (409, "ConditionalRequestConflict", "A conflicting operation occurred."),
}


@dataclass(frozen=True)
class FaultPlan:
    """Which faults, how often (probability per request), from which seed."""

    seed: int
    rates: Mapping[str, float] = field(default_factory=dict)
    latency_ms: tuple[int, int] = (20, 150)

    def __post_init__(self) -> None:
        unknown = set(self.rates) - set(S3_KINDS) - set(STORAGE_KINDS)
        if unknown or sum(self.rates.values()) > 1:
            raise ValueError(f"bad fault rates {dict(self.rates)}")

    def decide(self, n: int, allowed: Iterable[str]) -> tuple[str | None, random.Random]:
        """The fault for the n-th request (None: none), and a generator for its details."""
        rng = random.Random(f"{self.seed}:{n}")
        draw, edge = rng.random(), 0.0
        allowed = set(allowed)
        for kind in sorted(self.rates):
            edge += self.rates[kind]
            if draw < edge:
                return (kind if kind in allowed else None), rng
        return None, rng


class FaultLog:
    """Counts injected faults by kind (thread-safe), and records each in a history if given."""

    def __init__(self, history: History | None = None, actor: str = "s3") -> None:
        self.counts: Counter[str] = Counter()
        self.history, self.actor = history, actor
        self._lock = threading.Lock()
        self._n = 0

    def next_number(self) -> int:
        with self._lock:
            self._n += 1
            return self._n

    def note(self, kind: str, operation: str, key: str = "") -> None:
        with self._lock:
            self.counts[kind] += 1
        if self.history is not None:
            self.history.record("fault", self.actor, fault=kind, op=operation, key=key)


class S3Faults:
    """A botocore ``before-send`` hook that answers some requests with faults (see module).

    `only` narrows the requests that may get a fault (by operation and key), `limit` caps how
    many faults it injects: together they aim one fault at one chosen request.
    """

    def __init__(
        self,
        plan: FaultPlan,
        log: FaultLog | None = None,
        *,
        only: Callable[[str, str], bool] | None = None,
        limit: int | None = None,
    ) -> None:
        self.plan = plan
        self.log = log or FaultLog()
        self.only, self.limit = only, limit
        self._session = URLLib3Session()
        self.enabled = True

    def attach(self, client: Any) -> Any:
        client.meta.events.register("before-send.s3", self, unique_id=f"s3faults-{id(self)}")
        return client

    def __call__(self, request: Any, event_name: str = "", **_: Any) -> AWSResponse | None:
        if not self.enabled:
            return None
        operation, key = event_name.rsplit(".", 1)[-1], _key_of(request.url)
        if self.only is not None and not self.only(operation, key):
            return None
        if self.limit is not None and sum(self.log.counts.values()) >= self.limit:
            return None
        kind, rng = self.plan.decide(self.log.next_number(), self._allowed(operation, request))
        if kind is None:
            return None
        self.log.note(kind, operation, key)
        if kind == "latency":
            low, high = self.plan.latency_ms
            time.sleep(rng.uniform(low, high) / 1000)
            return None
        if kind == "reset":
            raise ConnectionClosedError(endpoint_url=request.url)
        if kind == "lost_response":
            self._session.send(request)  # applied by the server; the answer never arrives
            raise ConnectionClosedError(endpoint_url=request.url)
        status, code, message = _ERRORS[kind]
        body = f"<Error><Code>{code}</Code><Message>{message}</Message></Error>".encode()
        return AWSResponse(request.url, status, {}, _Raw(body))

    @staticmethod
    def _allowed(operation: str, request: Any) -> set[str]:
        allowed = {"error500", "slowdown503", "latency", "reset"}
        if operation in _WRITES:
            allowed.add("lost_response")
            headers = {k.lower() for k in request.headers}
            if {"if-match", "if-none-match"} & headers:
                allowed.add("conflict409")
        return allowed


class _Raw:
    """The raw stream `AWSResponse` reads a body from."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Any:
        yield self._body


def _key_of(url: str) -> str:
    """The object key of a path-style request URL (``http://host/bucket/key?query``)."""
    path = unquote(url.split("://", 1)[-1].split("?", 1)[0])
    parts = path.split("/", 2)
    return parts[2] if len(parts) == 3 else ""


class ZombieYard:
    """Writes whose client gave up that S3 applies later: each lands on `inner` (the shared
    store) at its due time, its condition judged then, at the first call of any process through
    a `StorageFaults` after that time."""

    def __init__(self, inner: Storage, now_ms: Callable[[], int]) -> None:
        self.inner, self.now_ms = inner, now_ms
        self.kept: list[tuple[int, int, str, str, Callable[[], object]]] = []
        self.landed: list[tuple[str, str, bool]] = []
        """(operation, key, applied) of each zombie that landed, in order."""
        self._lock = threading.Lock()
        self._count = 0

    def keep(self, delay_s: float, operation: str, key: str, write: Callable[[], object]) -> None:
        with self._lock:
            self._count += 1
            due = self.now_ms() + round(delay_s * 1000)
            self.kept.append((due, self._count, operation, key, write))
            self.kept.sort()

    def land_due(self) -> None:
        with self._lock:
            now = self.now_ms()
            due = [z for z in self.kept if z[0] <= now]
            self.kept = [z for z in self.kept if z[0] > now]
        for _, _, operation, key, write in due:
            try:
                write()
                applied = True
            except (Conflict, StorageError):  # its condition failed when it landed
                applied = False
            self.landed.append((operation, key, applied))


class StorageFaults:
    """Any `Storage`, with the faults S3 would surface through `S3Storage` (see module).

    ``error_before``: `StorageError`, nothing applied (5xx past every retry). ``error_after``:
    the write applied, then `StorageError` (its response lost past every retry).
    ``lost_response``: the write applied and is sent again, as the SDK's retry would, so the
    backend's token recognition must turn the conflict into success; a create is first
    rechecked by a HEAD after a pause (others may claim or delete it meanwhile), as
    `S3Storage` does (`recheck_create`: a ticket is then never sent again). ``conflict409``: a
    conditional write or delete that did not apply, settled as the storage layer settles a
    refusal (`StorageError` while the condition holds). ``latency``: `pause` first.
    ``stale_list``: a LIST that leaves out the keys written in the last `STALE_LIST_MS`.
    ``zombie``: a write that raises `StorageError` (its client gave up: a timeout) and lands
    later all the same, `ZOMBIE_S` after, its condition judged then (`ZombieYard`).
    """

    def __init__(
        self,
        inner: Storage,
        plan: FaultPlan,
        log: FaultLog | None = None,
        *,
        pause: Callable[[float], None] = time.sleep,
        zombies: ZombieYard | None = None,
    ) -> None:
        self.inner, self.plan = inner, plan
        self.log = log or FaultLog()
        self.pause = pause
        self.zombies = zombies
        self._local = threading.local()  # the delay of this thread's pending zombie

    def _fault(
        self, operation: str, key: str, *, write: bool, conditional: bool, stale: bool = False
    ) -> str | None:
        if self.zombies is not None:
            self.zombies.land_due()
        allowed = {"error_before", "latency"} | ({"stale_list"} if stale else set())
        if write:
            allowed |= {"error_after", "lost_response"} | ({"zombie"} if self.zombies else set())
        if conditional:
            allowed.add("conflict409")
        kind, rng = self.plan.decide(self.log.next_number(), allowed)
        if kind is None:
            return None
        self.log.note(kind, operation, key)
        if kind == "zombie":
            self._local.delay = rng.uniform(*ZOMBIE_S)
        elif kind == "latency":
            low, high = self.plan.latency_ms
            self.pause(rng.uniform(low, high) / 1000)
        elif kind == "error_before":
            raise StorageError(f"injected: {operation} {key} failed")
        return kind

    def _zombie(self, operation: str, key: str, write: Callable[[], object]) -> None:
        """Keep the write to land later; the caller sees its client give up."""
        assert self.zombies is not None
        self.zombies.keep(self._local.delay, operation, key, write)
        raise StorageError(f"injected: {operation} {key} timed out (it may still land)")

    def _after(self, kind: str | None, operation: str, key: str) -> None:
        if kind == "error_after":
            raise StorageError(f"injected: {operation} {key} applied, response lost")

    def get(self, key: str, *, if_match: str | None = None) -> Object | None:
        self._fault("GetObject", key, write=False, conditional=False)
        return self.inner.get(key, if_match=if_match)

    def head(self, key: str) -> Head | None:
        self._fault("HeadObject", key, write=False, conditional=False)
        return self.inner.head(key)

    def put(
        self,
        key: str,
        body: bytes,
        *,
        if_match: str | None = None,
        if_none_match: bool = False,
        token: str | None = None,
        resend_if: Callable[[], bool] | None = None,
    ) -> str:
        conditional = if_match is not None or if_none_match
        kind = self._fault("PutObject", key, write=True, conditional=conditional)
        if kind == "conflict409":  # nothing written; the storage layer settles the refusal
            return settle_put_conflict(
                self.inner, key, token=token, if_match=if_match, if_none_match=if_none_match
            )
        write = partial(
            self.inner.put,
            key,
            body,
            if_match=if_match,
            if_none_match=if_none_match,
            token=token,
            resend_if=resend_if,
        )
        if kind == "zombie":
            self._zombie("PutObject", key, write)
        etag = write()
        if kind == "lost_response":  # the write applied; its answer never came
            if if_none_match and token is not None:  # a create: a HEAD decides, as S3Storage
                self.pause(self.plan.latency_ms[1] / 1000)  # a slow HEAD: others act first
                found = recheck_create(self.inner, key, token, resend_if)
                if found is not None:
                    return found
            return write()  # sent again, as the SDK's retry would
        self._after(kind, "PutObject", key)
        return etag

    def delete(self, key: str, *, if_match: str | None = None) -> None:
        kind = self._fault("DeleteObject", key, write=True, conditional=if_match is not None)
        if kind == "conflict409" and if_match is not None:
            settle_delete_conflict(self.inner, key, if_match)
            return
        if kind == "zombie":
            self._zombie("DeleteObject", key, partial(self.inner.delete, key, if_match=if_match))
        self.inner.delete(key, if_match=if_match)
        if kind == "lost_response":
            self.inner.delete(key, if_match=if_match)
        self._after(kind, "DeleteObject", key)

    def delete_many(
        self, keys: Iterable[str], *, if_match: Mapping[str, str] | None = None
    ) -> None:
        keys = list(keys)
        kind = self._fault("DeleteObjects", keys[0] if keys else "", write=True, conditional=False)
        if kind == "zombie":
            write = partial(self.inner.delete_many, keys, if_match=if_match)
            self._zombie("DeleteObjects", keys[0] if keys else "", write)
        self.inner.delete_many(keys, if_match=if_match)
        self._after(kind, "DeleteObjects", keys[0] if keys else "")

    def open(self, key: str, *, etag: str | None = None) -> BinaryIO | None:
        self._fault("GetObject", key, write=False, conditional=False)
        return self.inner.open(key, etag=etag)

    def put_file(self, key: str, source: Source) -> Head:
        self._fault("PutObject", key, write=False, conditional=False)
        return self.inner.put_file(key, source)

    def copy(self, source: str, dest: str, *, if_match: str | None, size: int) -> None:
        kind = self._fault("CopyObject", dest, write=True, conditional=False)
        if kind == "zombie":
            write = partial(self.inner.copy, source, dest, if_match=if_match, size=size)
            self._zombie("CopyObject", dest, write)
        self.inner.copy(source, dest, if_match=if_match, size=size)
        if kind == "lost_response":  # the same bytes copied again
            self.inner.copy(source, dest, if_match=if_match, size=size)
        self._after(kind, "CopyObject", dest)

    def list(self, prefix: str, *, start_after: str | None = None, limit: int = 1000) -> Page:
        kind = self._fault("ListObjectsV2", prefix, write=False, conditional=False, stale=True)
        page = self.inner.list(prefix, start_after=start_after, limit=limit)
        if kind != "stale_list":
            return page
        fresh = [e for e in page.entries if e.served_ms - e.last_modified_ms >= STALE_LIST_MS]
        return Page(fresh, page.truncated)

    def list_folders(self, prefix: str) -> tuple[str, ...]:
        self._fault("ListObjectsV2", prefix, write=False, conditional=False)
        return self.inner.list_folders(prefix)
