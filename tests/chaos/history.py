"""The history of a run: every queue event, handler call, injected fault and crash, in order.

Sources, all appended under one lock with a global sequence number:

- the ``listener`` events of the producer, coordinators and workers (enqueue, dispatch, claim,
  handler_start, handler_finish, heartbeat, commit, applied, expire, fenced, lease_lost, ...),
  each tagged with the actor (process) that emitted it;
- the handler's own calls (``exec``): proof that a handler really ran, with the body;
- the `Oracle`: every ticket write and delete that S3 applied (``ticket_write``,
  ``ticket_delete``), whether or not its writer heard the answer: the ground truth of claims,
  renewals, commits and reaps; and what each copy written by an apply holds (``copy_write``);
- the test's own acts: foreign objects put in the inbox (``put_foreign``), enqueues that raised
  (``enqueue_failed``), crashes (``crash``), freezes and injected faults (``fault``).

Each entry carries two times: ``at_ms``, the emitting actor's clock (possibly skewed), and
``true_ms``, the reference clock of the run (the simulation's clock or the wall clock), which
is what the checker's timing rules use.

Order. An event is recorded after the S3 write it reports returned, in the writer's thread, and
before that thread's next S3 call. So if one actor's event caused another's (through S3), the
first is recorded first. Events that are not causally related (a claim and a reap racing on
time) may be recorded in either order: the checker orders those by ticket generation instead.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from s3queue.common.events import Event, Listener
from s3queue.errors import MalformedMessage
from s3queue.protocol.keys import QueueKeys, parse_msg_name, parse_ticket_name
from s3queue.protocol.records import decode_records, foreign_id
from s3queue.protocol.tickets import Ticket
from s3queue.storage.base import Head, Object, Page, Storage, iter_keys
from s3queue.storage.streams import Source


@dataclass(frozen=True, slots=True)
class Entry:
    """One recorded thing."""

    seq: int
    true_ms: int
    kind: str
    actor: str
    fields: dict[str, Any]

    def __getitem__(self, name: str) -> Any:
        return self.fields[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self.fields.get(name, default)


class History:
    """A thread-safe, append-only list of entries."""

    def __init__(self, true_ms: Callable[[], int]) -> None:
        self.true_ms = true_ms
        self.entries: list[Entry] = []
        self.watchers: list[Callable[[Entry], None]] = []
        """Called with each new entry, under the history's lock (keep them quick)."""
        self._lock = threading.Lock()

    def record(self, kind: str, actor: str, /, **fields: Any) -> Entry:
        with self._lock:
            entry = Entry(len(self.entries), self.true_ms(), kind, actor, fields)
            self.entries.append(entry)
            for watch in self.watchers:
                watch(entry)
            return entry

    def listener(self, actor: str) -> Listener:
        """A queue-event listener that records each event as done by `actor`."""

        def listen(event: Event) -> None:
            self.record(event.kind, actor, at_ms=event.at_ms, **event.fields)

        return listen

    def of(self, *kinds: str) -> list[Entry]:
        with self._lock:
            return [e for e in self.entries if e.kind in kinds]

    def __iter__(self) -> Iterator[Entry]:
        with self._lock:
            return iter(list(self.entries))

    def __len__(self) -> int:
        return len(self.entries)

    def dump(self, path: str) -> None:
        """One JSON object per line, for reading a failed run."""
        with open(path, "w", encoding="utf-8") as out:
            for e in self:
                row = {"seq": e.seq, "t": e.true_ms, "kind": e.kind, "actor": e.actor, **e.fields}
                out.write(json.dumps(row, default=repr) + "\n")


@dataclass(frozen=True, slots=True)
class Pending:
    """A message still in the queue at the end, and where."""

    id: str
    key: str
    attempt: int


@dataclass
class FinalState:
    """What the bucket holds at the end of a run."""

    pending: list[Pending] = field(default_factory=list)
    dead: list[dict[str, Any]] = field(default_factory=list)
    tickets: list[str] = field(default_factory=list)

    def pending_ids(self) -> dict[str, list[Pending]]:
        out: dict[str, list[Pending]] = {}
        for p in self.pending:
            out.setdefault(p.id, []).append(p)
        return out

    def dead_ids(self) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {}
        for d in self.dead:
            out.setdefault(str(d.get("id")), []).append(d)
        return out


def snapshot(storage: Storage, keys: QueueKeys) -> FinalState:
    """Read every message, dead letter and ticket of a queue (O(keys): for the end of a run)."""
    final = FinalState()
    for entry in iter_keys(storage, keys.inbox):
        name = entry.key[len(keys.root) :]
        final.pending.append(Pending(foreign_id(name), entry.key, 1))
    for folder in (keys.msg, keys.parts):
        for entry in iter_keys(storage, folder):
            final.pending.extend(_pending(storage, keys, entry.key))
    for entry in iter_keys(storage, keys.dlq):
        obj = storage.get(entry.key)
        if obj is not None and obj.body:  # an empty one: a redriven letter's marker
            doc = json.loads(obj.body)
            doc["key"] = entry.key
            final.dead.append(doc)
    for entry in iter_keys(storage, keys.tickets):
        if parse_ticket_name(entry.key[len(keys.tickets) :]) is not None:
            final.tickets.append(entry.key)
    return final


def is_tombstone(key: str, size: int) -> bool:
    """An emptied copy (``~o`` in its name, no bytes): a consumed copy kept as a marker that it
    was consumed, in cores that retire copies that way; never a message."""
    parsed = parse_msg_name(key.rsplit("/", 1)[-1])
    return size == 0 and parsed is not None and parsed.origin is not None


def live_work(storage: Storage, keys: QueueKeys) -> bool:
    """Whether the queue holds a message or a ticket (a few LISTs)."""
    tickets = storage.list(keys.tickets, limit=1).entries  # the first sorts before ~controls
    if (tickets and tickets[0].key != keys.controls) or storage.list(keys.inbox, limit=1).entries:
        return True
    return any(
        not is_tombstone(e.key, e.size)
        for folder in (keys.msg, keys.parts)
        for e in iter_keys(storage, folder)
    )


def _pending(storage: Storage, keys: QueueKeys, key: str) -> list[Pending]:
    obj = storage.get(key)
    if obj is None or is_tombstone(key, len(obj.body)):
        return []
    name = key[len(keys.root) :]
    parsed = parse_msg_name(name.rsplit("/", 1)[-1])
    if parsed is None:
        return [Pending(foreign_id(name), key, 1)]
    if parsed.target is not None:
        return []  # a late notice left behind: not a message
    try:
        return [Pending(r.id, key, r.attempt) for r in decode_records(obj.body)]
    except MalformedMessage:
        return [Pending(foreign_id(name), key, 1)]


class Oracle:
    """A `Storage` that records each applied ticket write (its state, generation, owner and
    outcomes) and ticket delete in the history, in the order they applied.

    Put it directly on the backend, below any fault injection, so that a write whose answer
    is lost is recorded too (exact on `MemoryStorage` in the simulation, where one call runs
    at a time; on S3 it can only sit above the client, and misses writes whose every retry
    lost its response).
    """

    def __init__(self, inner: Storage, history: History, tickets: str) -> None:
        self.inner, self.history, self.tickets = inner, history, tickets
        self._seen: set[tuple[str, str | None]] = set()

    def get(self, key: str, *, if_match: str | None = None) -> Object | None:
        return self.inner.get(key, if_match=if_match)

    def head(self, key: str) -> Head | None:
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
        etag = self.inner.put(
            key,
            body,
            if_match=if_match,
            if_none_match=if_none_match,
            token=token,
            resend_if=resend_if,
        )
        # A resent write recognised by its token (a lost response) applied only once.
        if key.startswith(self.tickets) and (key, token) not in self._seen:
            self._seen.add((key, token))
            self._wrote(key, body)
        elif body and "~o" in key.rsplit("/", 1)[-1]:
            self._copied(key, body)
        return etag

    def _copied(self, key: str, body: bytes) -> None:
        """A retry copy or a remainder: which messages it holds (a remainder keeps its source's
        name, but only some of its messages)."""
        try:
            ids = [r.id for r in decode_records(body)]
        except MalformedMessage:
            return
        self.history.record("copy_write", "s3", key=key, ids=ids)

    def _wrote(self, key: str, body: bytes) -> None:
        try:
            t = Ticket.decode(body)
        except MalformedMessage:
            return
        if t.state == "committed" and t.applied:
            # an apply cut short recorded its progress: the same commit, not another one
            self.history.record("apply_progress", "s3", ticket=key, applied=t.applied)
            return
        created = t.state == "pending" and t.generation == 0 and not t.outcomes
        self.history.record(
            "ticket_write",
            "s3",
            ticket=key,
            state=t.state,
            generation=t.generation,
            owner=t.owner,
            lease_until=t.lease_until_ms,
            outcomes=[(o.id, o.kind) for o in t.outcomes],
            running=t.running_id,
            **({"refs": [r.key for r in t.refs]} if created else {}),
        )

    def delete(self, key: str, *, if_match: str | None = None) -> None:
        self.inner.delete(key, if_match=if_match)
        if key.startswith(self.tickets):
            self.history.record("ticket_delete", "s3", ticket=key)

    def delete_many(
        self, keys: Iterable[str], *, if_match: Mapping[str, str] | None = None
    ) -> None:
        self.inner.delete_many(keys, if_match=if_match)

    def open(self, key: str, *, etag: str | None = None) -> BinaryIO | None:
        return self.inner.open(key, etag=etag)

    def put_file(self, key: str, source: Source) -> Head:
        return self.inner.put_file(key, source)

    def copy(self, source: str, dest: str, *, if_match: str | None, size: int) -> None:
        self.inner.copy(source, dest, if_match=if_match, size=size)

    def list(self, prefix: str, *, start_after: str | None = None, limit: int = 1000) -> Page:
        return self.inner.list(prefix, start_after=start_after, limit=limit)

    def list_folders(self, prefix: str) -> tuple[str, ...]:
        return self.inner.list_folders(prefix)
