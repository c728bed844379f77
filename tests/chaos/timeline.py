"""A history read back as the things the guarantees talk about: claims, runs, commits, expiries.

A *claim* is one worker's lease on one generation of a ticket; a *run* is one handler call on
one message, inside the claim its worker held when it started. A worker runs one ticket at a
time, so the claim of a run is the last claim of its actor before the run started.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from s3queue.protocol.keys import parse_msg_name
from s3queue.protocol.records import foreign_id

from chaos.history import Entry

TERMINAL = ("done", "dead")


@dataclass
class Claim:
    ticket: str
    gen: int
    actor: str
    entry: Entry
    renewed_ms: int
    lease_until_ms: int | None = None
    """The lease_until of the holder's last write that S3 applied, in true time (less the
    holder's clock offset). The holder computed it when it sent that PUT, so the lease counts
    from then, however long the PUT then took (SDK retries, latency, a stalled CPU)."""
    commit: Entry | None = None
    lost: Entry | None = None
    """lease_lost: a heartbeat or the commit found the ticket changed or gone."""
    runs: list[Run] = field(default_factory=list)


@dataclass
class Run:
    id: str
    attempt: int
    actor: str
    claim: Claim | None
    start: Entry
    end: Entry | None = None
    outcome: str | None = None
    """done, retry or dead from handler_finish; crash if the process died while it ran."""
    delay_ms: int = 0
    committed: bool = False
    recorded_seq: int | None = None
    """When its outcome reached S3 (a later heartbeat or the commit of its claim)."""

    @property
    def ticket(self) -> str | None:
        return self.claim.ticket if self.claim else None

    @property
    def gen(self) -> int:
        return self.claim.gen if self.claim else -1


@dataclass
class Timeline:
    offsets: dict[str, int] = field(default_factory=dict)
    """Actor -> its clock minus the reference clock (from its first event with ``at_ms``)."""
    acked: dict[str, Entry] = field(default_factory=dict)
    """Message id -> the enqueue (or put_foreign) that acknowledged it."""
    objects: dict[str, list[str]] = field(default_factory=dict)
    """Object id of a packed msg/ object -> the ids of its messages."""
    copies: dict[str, list[str]] = field(default_factory=dict)
    """Key of a copy written by an apply (retry copy, remainder) -> the ids it holds."""
    failed_enqueues: list[Entry] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    by_ticket: dict[str, list[Run]] = field(default_factory=dict)
    commits: list[tuple[Entry, Claim | None]] = field(default_factory=list)
    expires: dict[str, list[Entry]] = field(default_factory=dict)
    fenced: dict[str, Entry] = field(default_factory=dict)
    dispatched: dict[str, Entry] = field(default_factory=dict)
    crashes: list[Entry] = field(default_factory=list)
    wrong_partitions: list[Entry] = field(default_factory=list)
    """Handler runs that saw another partition than their message was enqueued into."""
    freezes: list[Entry] = field(default_factory=list)
    execs: list[Entry] = field(default_factory=list)
    troubles: list[Entry] = field(default_factory=list)
    """heartbeat_failed and worker_error: S3 errors a worker survived."""
    current: dict[str, Claim] = field(default_factory=dict)
    open_runs: dict[str, Run] = field(default_factory=dict)
    writes: dict[tuple[str, int], list[Entry]] = field(default_factory=dict)
    """(ticket, generation) -> the ticket writes S3 applied (from the `Oracle`), in order."""
    deletes: list[Entry] = field(default_factory=list)
    applied: dict[str, list[Entry]] = field(default_factory=dict)
    """ticket -> its applied events (by the committer or a helper): it was committed by then."""
    grouped: dict[str, Entry] = field(default_factory=dict)
    """Message id of a grouped message -> the first enqueue that acknowledged it."""
    finishes: list[tuple[Entry, Claim | None]] = field(default_factory=list)
    """Every terminal handler_finish (done or dead, with or without a handler call: a delivery
    limit, a dedup marker found done), with the claim its worker held."""
    explicit: set[str] = field(default_factory=set)
    """Explicit ids (``enqueue(id=)``): exactly-once, never excused as a resent PUT."""
    versions: dict[str, list[Entry]] = field(default_factory=dict)
    """Message id of a key another service PUT again -> its versions' put_foreign entries (each
    with its `n`): each version is its own message (`checker._check_versions`)."""
    reput_ids: set[str] = field(default_factory=set)
    """Message ids of keys another service PUT again, including a key whose every PUT raised
    (a PUT that raised may have landed all the same: a crash after it, a zombie request), so a
    version of its own ran with no put_foreign recorded for it."""
    purges: list[list[int]] = field(default_factory=list)
    """The operator's purges: [seq when it started, seq when it ended] (an open one: [start])."""
    redrives: dict[str, list[Entry]] = field(default_factory=dict)
    """Message id -> the operator's redrives of it (recorded before each started)."""
    _ids: dict[str, set[str]] = field(default_factory=dict)
    reaps: dict[str, dict[int, Entry]] = field(default_factory=dict)
    """ticket -> new generation -> the first record of the reap that made it: the reap's
    write (`Oracle`) or the coordinator's expire event, whichever came first."""

    def runs_of(self) -> dict[str, list[Run]]:
        out: dict[str, list[Run]] = {}
        for run in self.runs:
            out.setdefault(run.id, []).append(run)
        return out

    def ids_of_key(self, key: str) -> set[str]:
        """The message ids an object key may hold (a packed object: all of them)."""
        name = _queue_relative(key)
        if name.startswith("inbox/"):
            return {foreign_id(name)}
        if key in self.copies:
            return set(self.copies[key])
        parsed = parse_msg_name(key.rsplit("/", 1)[-1])
        if parsed is None:
            return {foreign_id(name)}
        return set(self.objects.get(parsed.id, [parsed.id]))

    def ticket_ids(self, ticket: str) -> set[str]:
        if ticket not in self._ids:
            entry = self.dispatched.get(ticket)
            refs = entry["refs"] if entry is not None else []
            self._ids[ticket] = {i for key in refs for i in self.ids_of_key(key)}
        return self._ids[ticket]


def maybe_purged(t: Timeline, message_id: str) -> bool:
    """The message was acknowledged before a purge of the operator's ended (or its enqueue
    raised and may have landed any time): it may be gone, purged while pending, unrun."""
    acked = t.acked.get(message_id)
    if acked is None:  # an enqueue that raised, landed all the same (a zombie PUT): any time
        return bool(t.purges)
    return purged_between(t, acked.seq, math.inf)


def purged_between(t: Timeline, after: float, before: float) -> bool:
    """A purge ran (at least in part) between two sequence numbers: a message it took and that
    was then enqueued again by its id is a fresh one (attempt 1, not a redelivery)."""
    return any(p[0] < before and (p[-1] if len(p) > 1 else math.inf) > after for p in t.purges)


def build(entries: Iterable[Entry]) -> Timeline:
    """Read entries in sequence order into a `Timeline`.

    With `Oracle` entries (``ticket_write``), what S3 applied replaces what workers said they
    did: a commit whose response was lost has no ``commit`` event, but it has a write.
    """
    t = Timeline()
    for e in entries:
        if "at_ms" in e.fields and e.actor not in t.offsets:
            t.offsets[e.actor] = int(e["at_ms"]) - e.true_ms
        handler = _READERS.get(e.kind)
        if handler is not None:
            handler(t, e)
    if t.writes:
        _from_oracle(t)
    return t


def _from_oracle(t: Timeline) -> None:
    claims = {(c.ticket, c.gen): c for c in t.claims}
    t.commits = []
    for run in t.runs:
        run.committed, run.recorded_seq = False, None
    frozen: dict[str, list[Entry]] = {}
    for e in t.freezes:
        frozen.setdefault(e.actor, []).append(e)
    for (ticket, gen), writes in sorted(t.writes.items(), key=lambda kv: kv[1][0].seq):
        claim = claims.get((ticket, gen))
        previous = -1
        for w in writes:
            if claim is not None and w["state"] in ("claimed", "committed"):
                claim.renewed_ms = _sent_ms(frozen.get(claim.actor, []), w, previous)
                if w.get("lease_until") and claim.actor in t.offsets:
                    claim.lease_until_ms = int(w["lease_until"]) - t.offsets[claim.actor]
            previous = w.seq
            if w["state"] == "committed":
                if claim is not None:
                    claim.commit = claim.commit or w
                t.commits.append((w, claim))
                _mark_committed(t, w, claim)
            _mark_recorded(t, w, claim)


def _sent_ms(freezes: list[Entry], w: Entry, previous: int) -> int:
    """When the holder sent ticket write `w`: its lease_until counts from then. A freeze of its
    process in that very PUT (a pause, a hung connection) delays the write, not the lease."""
    where = f"put {w['ticket']}"
    held = [f.true_ms for f in freezes if previous < f.seq < w.seq and f.get("where") == where]
    return min(held, default=w.true_ms)


def _mark_recorded(t: Timeline, w: Entry, claim: Claim | None) -> None:
    written = {(str(i), str(k)) for i, k in w["outcomes"]}
    for run in claim.runs if claim is not None else ():
        if run.recorded_seq is None and run.end is not None and (run.id, run.outcome) in written:
            run.recorded_seq = w.seq


def _mark_committed(t: Timeline, w: Entry, claim: Claim | None) -> None:
    kinds = {str(i): str(k) for i, k in w["outcomes"]}
    for run in reversed(t.by_ticket.get(w["ticket"], [])):
        if kinds.get(run.id) != run.outcome or run.committed:
            continue
        if run.claim is claim or run.recorded_seq is not None:
            run.committed = True
            kinds.pop(run.id)


def _write(t: Timeline, e: Entry) -> None:
    if "refs" in e.fields:  # its creation: the refs even if the dispatch went unheard
        t.dispatched.setdefault(e["ticket"], e)
    gen = int(e["generation"])
    t.writes.setdefault((e["ticket"], gen), []).append(e)
    if e["state"] == "pending" and gen > 0:
        t.reaps.setdefault(e["ticket"], {}).setdefault(gen, e)


def _enqueue(t: Timeline, e: Entry) -> None:
    ids = [e["message_id"]] if "message_id" in e.fields else list(e["message_ids"])
    for message_id in ids:
        if message_id in t.explicit:
            t.acked.setdefault(message_id, e)  # a repeated enqueue acknowledges nothing new
        else:
            t.acked[message_id] = e
    parsed = parse_msg_name(str(e.get("key", "")).rsplit("/", 1)[-1])
    if parsed is not None and len(ids) > 1:
        t.objects[parsed.id] = list(ids)
    if parsed is not None and parsed.group is not None and len(ids) == 1:
        t.grouped.setdefault(ids[0], e)  # a repeated explicit-id enqueue keeps its place


def _foreign(t: Timeline, e: Entry) -> None:
    t.acked[e["id"]] = e
    if "n" in e.fields:  # a version of a key put again
        t.versions.setdefault(str(e["id"]), []).append(e)
        t.reput_ids.add(str(e["id"]))


def _enqueue_failed(t: Timeline, e: Entry) -> None:
    t.failed_enqueues.append(e)
    if "reput" in e.fields:  # a version that may have landed, a message of its own
        t.reput_ids.add(str(e["reput"]))


def _claim(t: Timeline, e: Entry) -> None:
    claim = Claim(e["ticket"], int(e["generation"]), e.actor, e, e.true_ms)
    t.claims.append(claim)
    t.current[e.actor] = claim


def _heartbeat(t: Timeline, e: Entry) -> None:
    claim = t.current.get(e.actor)
    if claim is None or claim.ticket != e["ticket"]:
        return
    claim.renewed_ms = e.true_ms
    for run in t.runs:
        if run.claim is claim and run.end is not None and run.recorded_seq is None:
            run.recorded_seq = e.seq


def _start(t: Timeline, e: Entry) -> None:
    parsed = parse_msg_name(str(e.get("ref", "")).rsplit("/", 1)[-1])
    if parsed is not None:  # learn a packed object's ids (its enqueue may have gone unheard)
        ids = t.objects.setdefault(parsed.id, [])
        if e["message_id"] not in ids:
            ids.append(e["message_id"])
    claim = t.current.get(e.actor)
    run = Run(e["message_id"], int(e["attempt"]), e.actor, claim, e)
    t.runs.append(run)
    t.open_runs[e.actor] = run
    if claim is not None:
        claim.runs.append(run)
        t.by_ticket.setdefault(claim.ticket, []).append(run)


def _finish(t: Timeline, e: Entry) -> None:
    if e.get("outcome") in TERMINAL:
        t.finishes.append((e, t.current.get(e.actor)))
    run = t.open_runs.get(e.actor)
    if "duration_ms" not in e.fields or run is None or run.id != e["message_id"]:
        return  # an outcome without a handler call (malformed, dedup, delivery limit)
    run.end, run.outcome = e, e["outcome"]
    run.delay_ms = int(e.get("delay_ms", 0))
    del t.open_runs[e.actor]


def _crash(t: Timeline, e: Entry) -> None:
    t.crashes.append(e)
    run = t.open_runs.pop(e.actor, None)
    if run is not None:
        run.end, run.outcome = e, "crash"
    # Died right after its commit reached S3; not an apply's record of progress (`applied`),
    # which any helper writes on a committed ticket whoever committed it.
    mine = e.get("owner", e.actor) == e.actor
    if e.get("wrote_state") == "committed" and not e.get("applied") and mine:
        _commit(t, e)


def _commit(t: Timeline, e: Entry) -> None:
    claim = t.current.get(e.actor)
    if claim is not None and claim.ticket == e["ticket"]:
        claim.commit = e
        claim.renewed_ms = e.true_ms
    else:
        claim = None
    t.commits.append((e, claim))
    kinds = {str(i): str(k) for i, k in e["outcomes"]}
    for run in reversed(t.by_ticket.get(e["ticket"], [])):
        if kinds.get(run.id) != run.outcome or run.committed:
            continue
        # Its own claim's runs, or an earlier generation's that a heartbeat had written.
        if run.claim is claim or run.recorded_seq is not None:
            run.committed = True
            run.recorded_seq = run.recorded_seq if run.recorded_seq is not None else e.seq
            kinds.pop(run.id)


def _lost(t: Timeline, e: Entry) -> None:
    claim = t.current.get(e.actor)
    if claim is not None and claim.ticket == e["ticket"]:
        claim.lost = e


def _expire(t: Timeline, e: Entry) -> None:
    t.expires.setdefault(e["ticket"], []).append(e)
    t.reaps.setdefault(e["ticket"], {}).setdefault(int(e["generation"]), e)


def _fenced(t: Timeline, e: Entry) -> None:
    t.fenced[e["ticket"]] = e


def _dispatch(t: Timeline, e: Entry) -> None:
    t.dispatched[e["ticket"]] = e


_READERS: dict[str, Callable[[Timeline, Entry], None]] = {
    "enqueue": _enqueue,
    "put_foreign": _foreign,
    "explicit_id": lambda t, e: t.explicit.add(str(e["id"])),
    "redrive": lambda t, e: t.redrives.setdefault(str(e["id"]), []).append(e),
    "purge_started": lambda t, e: t.purges.append([e.seq]),
    "purge_done": lambda t, e: t.purges[-1].append(e.seq),
    "enqueue_failed": _enqueue_failed,
    "claim": _claim,
    "heartbeat": _heartbeat,
    "handler_start": _start,
    "handler_finish": _finish,
    "crash": _crash,
    "freeze": lambda t, e: t.freezes.append(e),
    "exec": lambda t, e: t.execs.append(e),
    "wrong_partition": lambda t, e: t.wrong_partitions.append(e),
    "heartbeat_failed": lambda t, e: t.troubles.append(e),
    "worker_error": lambda t, e: t.troubles.append(e),
    "commit": _commit,
    "lease_lost": _lost,
    "expire": _expire,
    "fenced": _fenced,
    "dispatch": _dispatch,
    "ticket_write": _write,
    "ticket_delete": lambda t, e: t.deletes.append(e),
    "applied": lambda t, e: t.applied.setdefault(e["ticket"], []).append(e),
    "copy_write": lambda t, e: t.copies.__setitem__(e["key"], list(e["ids"])),
}


def _queue_relative(key: str) -> str:
    """A message key from its queue's folder on: ``inbox/...``, ``msg/...`` or ``parts/...``."""
    for folder in ("/inbox/", "/msg/", "/parts/"):
        at = key.find(folder)
        if at >= 0:
            return key[at + 1 :]
    return key
