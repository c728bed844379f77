"""The coordinator's leader lease, with epochs and seals that fence a stale ex-leader.

Leadership is the CAS chain on one object, not a clock: a leader whose write fails has lost.
Time only decides when a challenger may take over, and it is S3's time, not the holder's: the
lease lapses once S3 says it was last written more than its ``ttl`` ago (the GET's ``Date``
minus the object's ``Last-Modified``, `storage.base.written_ago`). A holder whose clock runs 10
minutes fast therefore stalls nobody: its lease lapses ``ttl`` after its last renewal, as S3
counts. The holder renews on its own clock, after a third of the TTL of elapsed time, which
an offset does not change. (A document without ``ttl``, written by an older version, is judged
the old way: its ``lease_until`` plus the skew tolerance against the reader's clock.)

Fencing. A leader of epoch ``e`` names its tickets ``<e>-<seq>``. A challenger takes over by
CAS to epoch ``e+1`` with ``seals[e] = PENDING``, then lists the tickets and CASes
``seals[e] = highest seq of e it saw``. Workers accept a ticket only if `LeaseDoc.accepts`:

    ex-leader (paused)   creates T(e, s) ...............................
    challenger                       CAS epoch e+1 (seal pending) --- LIST tickets --- CAS seal
    worker                                                 GET lease -> accepts(e, s)?

T created before the worker's GET. If that GET saw epoch e, the takeover came later, so the
challenger's LIST (after its takeover) saw T: seal >= s and T's messages count as in flight.
If it saw epoch e+1, the worker trusts only seq <= seal. A ticket the ex-leader creates after
the LIST has a higher seq than any it had before, so it is above the seal and never runs.

Blocks: publishing many tickets at once. That last sentence holds only while a leader creates
its tickets one after another. To have several PUTs in flight at once, a leader first
*reserves* their seqs, ``[start, end)``, by CAS on the lease (`reserve`, which also proves it
still leads), and reserves the next block only once every PUT of this one has returned. So a
ticket of epoch e can land late, after a challenger's LIST, only if its seq is in e's last
block. A challenger copies that block from the document it takes over (``blocks[e]``) and,
sealing, marks every seq of the block at or below the seal that its LIST did not show as a
*hole* (``holes[e]``): rejected like a seq above the seal. An unseen seq is one of: not landed
yet (it must never run: rejected), finished and deleted (gone: rejecting it changes nothing),
or never to land (its PUT failed). A seen one is never a hole, so no live ticket is fenced.

Doubts: a create that may still land. "Every PUT has returned" is not "no PUT will land": a
request the client gave up on may still be applied by S3 later (a *zombie*). So a leader never
resends a ticket and never forgets one whose create failed: it *doubts* it (a CAS adding the seq
to ``doubts[e]``, which workers reject like a hole), looks (HEAD), then *settles* it (a CAS):
found, it runs as any other; missing, the seq becomes a hole and its messages may go out again.
A leader deposed in between leaves the doubt to its successor, which settles it when sealing
(docs/protocol.md, "Zombie requests", says why each step holds).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from s3queue.common.clock import Clock
from s3queue.errors import Conflict, MalformedMessage
from s3queue.protocol import advisory
from s3queue.storage.base import Storage, new_token, written_ago

PENDING = -2
"""Seal value: the epoch was taken over but its highest ticket is not known yet."""


@dataclass(slots=True)
class LeaseDoc:
    """The lease object's content."""

    owner: str | None
    epoch: int
    lease_until_ms: int
    seals: dict[int, int] = field(default_factory=dict)
    """epoch -> highest valid ticket seq of that epoch, or PENDING."""
    blocks: dict[int, tuple[int, int]] = field(default_factory=dict)
    """epoch -> its last reserved block of seqs ``[start, end)`` (the leader's own, or a
    taken-over epoch's until it is sealed)."""
    holes: dict[int, tuple[int, ...]] = field(default_factory=dict)
    """epoch -> seqs that never run: unseen in its last block at or below its seal, and the
    leader's own tickets whose create failed and which were then found missing (`settle`)."""
    ttl_ms: int = 0
    """The holder's TTL: the lease lapses this long after its last write, by S3's time."""
    doubts: dict[int, tuple[int, ...]] = field(default_factory=dict)
    """epoch -> seqs whose create failed or lost its answer, not settled yet: they may land
    late (a zombie request) or never; rejected meanwhile (`LeaderLease.doubt`, `settle`)."""
    pace: tuple[float, ...] = ()
    """Advisory (advisory.py): the writer's ticket pace (`sizing.Pace.state`)."""
    ends_ms: int = 0
    """Advisory: when the holder's run plans to release the lease, by its clock (0: no plan)."""
    frontiers: dict[str, str] = field(default_factory=dict)
    """Advisory: where each folder's last scan up to now ended ("": the default folder)."""

    def lapsed(self, written_ago_ms: int, now_ms: int, skew_ms: int) -> bool:
        """Whether a challenger may take over: released, or not written for ``ttl`` by S3's
        time (module docstring); a document without ``ttl``: by the reader's clock."""
        if self.lease_until_ms == 0:
            return True
        if self.ttl_ms:
            return written_ago_ms > self.ttl_ms
        return self.lease_until_ms + skew_ms < now_ms

    def accepts(self, epoch: int, seq: int) -> bool | None:
        """Whether a ticket may run; None while its epoch's seal is pending (ask again later)."""
        seal = self.seals.get(epoch)
        if seal == PENDING:
            return None
        if seq in self.holes.get(epoch, ()) or seq in self.doubts.get(epoch, ()):
            return False
        if epoch == self.epoch:
            return seal is None or seq <= seal
        return epoch < self.epoch and seal is not None and seq <= seal

    def encode(self, token: str) -> bytes:
        doc: dict[str, Any] = {
            "v": 1,
            "token": token,
            "owner": self.owner,
            "epoch": self.epoch,
            "lease_until": self.lease_until_ms,
            "seals": {str(k): v for k, v in sorted(self.seals.items())},
        }
        if self.blocks:
            doc["blocks"] = {str(k): list(v) for k, v in sorted(self.blocks.items())}
        if self.holes:
            doc["holes"] = {str(k): list(v) for k, v in sorted(self.holes.items())}
        if self.doubts:
            doc["doubts"] = {str(k): list(v) for k, v in sorted(self.doubts.items())}
        if self.ttl_ms:
            doc["ttl"] = self.ttl_ms
        doc.update(advisory.fields(self.pace, self.ends_ms, self.frontiers))
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> LeaseDoc:
        try:
            doc: dict[str, Any] = json.loads(data)
            seals = {int(k): int(v) for k, v in doc.get("seals", {}).items()}
            blocks = {int(k): (int(v[0]), int(v[1])) for k, v in doc.get("blocks", {}).items()}
            holes = {int(k): tuple(map(int, v)) for k, v in doc.get("holes", {}).items()}
            doubts = {int(k): tuple(map(int, v)) for k, v in doc.get("doubts", {}).items()}
            owner, epoch, until = doc.get("owner"), int(doc["epoch"]), int(doc["lease_until"])
            ttl = int(doc.get("ttl", 0))
            pace, ends, fronts = advisory.pace(doc), advisory.ends(doc), advisory.frontiers(doc)
            return cls(owner, epoch, until, seals, blocks, holes, ttl, doubts, pace, ends, fronts)
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            raise MalformedMessage(f"undecodable coordinator lease: {exc}") from exc

    def evolve(self, **changes: Any) -> LeaseDoc:
        """A copy with `changes`; the maps copied, never shared."""
        copy = replace(
            self,
            seals=dict(self.seals),
            blocks=dict(self.blocks),
            holes=dict(self.holes),
            doubts=dict(self.doubts),
        )
        return replace(copy, **changes)


def read_lease(storage: Storage, key: str) -> LeaseDoc | None:
    obj = storage.get(key)
    return None if obj is None else LeaseDoc.decode(obj.body)


class LeaderLease:
    """Acquire, renew, seal and release the lease of one queue."""

    def __init__(
        self,
        storage: Storage,
        key: str,
        *,
        owner: str,
        clock: Clock,
        ttl_ms: int,
        skew_ms: int,
        epochs: Callable[[], set[int]] = set,
        pace: Callable[[], tuple[float, ...]] = tuple,
        frontiers: Callable[[], dict[str, str]] = dict,
        first_block: int = 0,
    ) -> None:
        self._storage = storage
        self.first_block = first_block  # seqs [0, it) of an epoch: reserved by its takeover
        self._key = key
        self.owner = owner
        self._clock = clock
        self._ttl = ttl_ms
        self._skew = skew_ms
        self.doc: LeaseDoc | None = None
        self._etag: str | None = None
        self._epochs = epochs
        self._pace, self._frontiers = pace, frontiers
        """The holder's ticket pace and frontiers, written with every lease write."""
        self.inherited: tuple[float, ...] = ()
        """The pace the lease held when we took it over (our predecessor's)."""
        self.inherited_frontiers: dict[str, str] = {}
        self.ends: Callable[[], int] = advisory.no_plan
        """When our run plans to release, written with every lease write (`LeaseDoc.ends_ms`);
        the service sets it for a run that ends (a Lambda's)."""
        self.leader_ends_ms = 0
        """The holder's planned release, as the lease said when we last found it held."""

    @property
    def leading(self) -> bool:
        return self.doc is not None

    @property
    def epoch(self) -> int:
        return self.doc.epoch if self.doc else 0

    def ensure(self) -> bool:
        """Lead: acquire, or renew once a third of the lease has passed. False if another leads."""
        now = self._clock.now_ms()
        if self.doc is not None:
            if now < self.doc.lease_until_ms - 2 * self._ttl // 3:
                return True
            return self._write(self.doc, lease_until=now + self._ttl)
        return self._acquire(now)

    def _acquire(self, now: int) -> bool:
        obj = self._storage.get(self._key)
        if obj is None:
            first = LeaseDoc(self.owner, 1, now + self._ttl, blocks=self._first_block(1))
            return self._write(first, create=True)
        try:
            current = LeaseDoc.decode(obj.body)
        except MalformedMessage:
            current = self._from_tickets()
        ago = written_ago(obj.last_modified_ms, obj.served_ms, now)
        if not current.lapsed(ago, now, self._skew):
            self.leader_ends_ms = current.ends_ms
            return False
        seals = dict(current.seals)
        seals.setdefault(current.epoch, PENDING)  # a clean release already sealed its epoch
        # The last block of each epoch still to seal: where its late tickets may be.
        blocks = {e: b for e, b in current.blocks.items() if seals.get(e) == PENDING}
        taken = current.evolve(
            owner=self.owner,
            epoch=current.epoch + 1,
            lease_until_ms=now + self._ttl,
            seals=seals,
            blocks={**blocks, **self._first_block(current.epoch + 1)},
        )
        self._etag = obj.etag
        self.inherited, self.inherited_frontiers = current.pace, current.frontiers
        return self._write(taken)

    def _first_block(self, epoch: int) -> dict[int, tuple[int, int]]:
        return {epoch: (0, self.first_block)} if self.first_block else {}  # one CAS less

    def _write(
        self, doc: LeaseDoc, *, lease_until: int | None = None, create: bool = False
    ) -> bool:
        new = doc.evolve(
            lease_until_ms=lease_until or doc.lease_until_ms,
            ttl_ms=self._ttl,
            pace=self._pace(),
            ends_ms=self.ends(),
            frontiers=self._frontiers(),
        )
        token = new_token()
        try:
            if create:
                etag = self._storage.put(
                    self._key, new.encode(token), if_none_match=True, token=token
                )
            else:
                etag = self._storage.put(
                    self._key, new.encode(token), if_match=self._etag, token=token
                )
        except Conflict:
            self.doc = self._etag = None
            return False
        self.doc, self._etag = new, etag
        return True

    def _from_tickets(self) -> LeaseDoc:
        """An unreadable lease (overwritten by hand?): seal every epoch the tickets show, as
        after any takeover, and jump to an epoch above any used before (the clock in seconds),
        so a stale leader of a forgotten epoch can never pass for the new one."""
        epochs = self._epochs()
        top = max([*epochs, self._clock.now_ms() // 1000])
        return LeaseDoc(None, top, 0, {e: PENDING for e in epochs if e != top})

    def abdicate(self) -> None:
        """Forget the lease without writing: a later epoch exists, ours is stale."""
        self.doc = self._etag = None

    def pending_seals(self) -> list[int]:
        return [e for e, s in (self.doc.seals.items() if self.doc else ()) if s == PENDING]

    def update_seals(self, seals: dict[int, int], holes: dict[int, tuple[int, ...]]) -> bool:
        """Replace the seals and holes of taken-over epochs (fill pending ones, drop epochs
        without tickets) by CAS; a sealed epoch's block and doubts are no longer needed (the
        seal settled them), our own epoch's are kept."""
        if self.doc is None:
            return False
        own = self.doc.epoch
        blocks = {e: b for e, b in self.doc.blocks.items() if e == own}
        doubts = {e: d for e, d in self.doc.doubts.items() if e == own}
        if own in self.doc.holes:
            holes = {**holes, own: self.doc.holes[own]}
        doc = self.doc.evolve(seals=seals, holes=holes, blocks=blocks, doubts=doubts)
        return self._write(doc)

    def doubt(self, seq: int) -> bool:
        """Mark our ticket `seq` doubtful by CAS: its create failed or lost its answer, so it
        may land late (a zombie request) or never, and no worker may run it until `settle`.
        False if we no longer lead."""
        if self.doc is None:
            return False
        own = self.doc.epoch
        doubts = {**self.doc.doubts, own: (*self.doc.doubts.get(own, ()), seq)}
        return self._write(self.doc.evolve(doubts=doubts))

    def settle(self, seq: int, *, landed: bool) -> bool:
        """Settle a doubtful ticket by CAS: found after `doubt` (it landed: it runs as any
        other), or found missing (a hole: wherever and whenever it lands, it never runs)."""
        if self.doc is None:
            return False
        own = self.doc.epoch
        doubts = dict(self.doc.doubts)
        left = tuple(q for q in doubts.pop(own, ()) if q != seq)
        if left:
            doubts[own] = left
        holes = dict(self.doc.holes)
        if not landed:
            holes[own] = (*holes.get(own, ()), seq)
        return self._write(self.doc.evolve(doubts=doubts, holes=holes))

    def reserve(self, start: int, end: int) -> bool:
        """Reserve seqs ``[start, end)`` of our epoch for tickets published at once (module
        docstring), renewing the lease; False if we no longer lead."""
        if self.doc is None:
            return False
        doc = self.doc.evolve(
            lease_until_ms=self._clock.now_ms() + self._ttl,
            blocks={**self.doc.blocks, self.doc.epoch: (start, end)},
        )
        return self._write(doc)

    def release(self, last_seq: int) -> None:
        """Hand over at once: seal our epoch at its last ticket and let the lease lapse (every
        PUT of ours has returned: no ticket of ours can land later, no holes are needed)."""
        if self.doc is None:
            return
        own = self.doc.epoch
        seals = {**self.doc.seals, own: last_seq}
        blocks = {e: b for e, b in self.doc.blocks.items() if e != own}
        self._write(self.doc.evolve(lease_until_ms=0, seals=seals, blocks=blocks), lease_until=0)
        self.doc = self._etag = None
