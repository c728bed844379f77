"""`Writer`: puts one queue's message objects: a record with its dedup marker (an explicit id)
and its late notice (a slow grouped PUT), or a packed object.

A grouped message's place in its group is its key time, the producer's clock when the enqueue
starts. The leader reads only a `straggler_margin` (2 s) behind its cursor, so a PUT that lands
later than that (retried 503s, a slow link) is behind the cursor, and the group's next message
could be read and sent first. So an enqueue whose grouped PUT took longer than `LANDING_MS`
puts a *late notice* (a small object keyed now, ``~p<target>``) before it returns: the leader
reads the notice ahead of anything enqueued after it and fetches its target first::

    producer   PUT m1 (key t0) .......(slow)....... lands --- PUT notice (key t1) --- return
    producer                                                                   PUT m2 (key >= t1)
    leader                    cursor passes t0 ............ LIST: notice, m2 -> LIST m1 first
"""

from __future__ import annotations

import json
import logging

from s3queue.common.clock import Clock
from s3queue.common.events import Emitter
from s3queue.errors import Conflict, MalformedMessage
from s3queue.protocol import markers
from s3queue.protocol.keys import MsgKey, QueueKeys, key_time, new_id
from s3queue.protocol.records import Record, encode_records
from s3queue.storage.base import Storage, new_token

_log = logging.getLogger(__name__)

LANDING_MS = 500
"""A grouped PUT that took longer than this gets a late notice; the coordinator's
`straggler_margin` (2 s) must exceed it by the producers' clock skew (so 1.5 s by default)."""
MAX_NOTICES = 10


class Writer:
    """Writes the message objects of one queue (all its partitions)."""

    def __init__(
        self,
        storage: Storage,
        keys: QueueKeys,
        *,
        clock: Clock,
        emit: Emitter,
        max_message_bytes: int,
        order: Clock | None = None,
    ) -> None:
        self.storage, self.keys, self.clock, self.emit = storage, keys, clock, emit
        self.order = order or clock
        """The clock of grouped keys: S3's time by default (storage/servertime.py), so a group's
        order does not depend on any producer's clock; `clock` keys the rest."""
        self.name = keys.queue
        self.max_message_bytes = max_message_bytes

    def enqueued(self, message_id: str) -> bool:
        """Whether an enqueue of this explicit id already put its message (or it was handled):
        a repeated `enqueue_file` then uploads nothing."""
        found = markers.read(self.storage, self.keys, message_id)
        if found is None:
            return False
        marker = found.marker
        if marker.final or marker.key is None:
            return marker.final
        head = self.storage.head(marker.key)
        return head is not None and not self.keys.is_tombstone(marker.key, head.size)

    def send_one(self, keys: QueueKeys, record: Record, delay_ms: int, now: int) -> bool:
        """`key_for`, `encode` and `put_one`: see `put_one`."""
        key = self.key_for(record, delay_ms, now)
        return self.put_one(keys, record, key, self.encode([record]), now)

    def key_for(self, record: Record, delay_ms: int, now: int) -> MsgKey:
        """The key of `record` as one message object enqueued at `now` (a grouped one: no
        earlier than S3's time, `grouped_now`)."""
        if record.group is not None:
            now = self.grouped_now()
        visible = now + delay_ms
        # The key's id is always a generated one: keys of one millisecond sort by it, and only
        # generated ids follow enqueue order (a group's FIFO); an explicit id is in the record.
        key_id = new_id(now) if record.dedup else record.id
        if record.group is not None:
            return MsgKey(now, key_id, record.group, visible if visible > now else 0)
        return MsgKey(visible, key_id)

    def put_one(
        self, keys: QueueKeys, record: Record, key: MsgKey, data: tuple[bytes, str], now: int
    ) -> bool:
        """Put `record` (encoded as `data`) as one message object at `key` (after its marker,
        if its id is explicit); whether it was this call's object that went in (False: the
        id's first one is there)."""
        written = True
        if record.dedup:
            keys, key, written = self.put_once(keys, record, key, data)
        else:
            self.create(keys.msg_key(key), data)
        if record.group is not None:
            self.landed(keys, key)
        self.emit("enqueue", now, message_id=record.id, key=keys.msg_key(key))
        return written

    def encode(self, records: list[Record]) -> tuple[bytes, str]:
        token = new_token()
        data = encode_records(records, token)
        if len(data) > self.max_message_bytes:
            raise MalformedMessage(
                f"message of {len(data)} bytes exceeds max_message_bytes={self.max_message_bytes}"
            )
        return data, token

    def create(self, key: str, encoded: tuple[bytes, str]) -> None:
        self.storage.put(key, encoded[0], if_none_match=True, token=encoded[1])

    def grouped_now(self) -> int:
        """The key time of a grouped message: S3's time, once the clock knows it (a clock that
        learns S3's time from answers asks once, `ServerClock.calibrate`, before the first)."""
        calibrate = getattr(self.order, "calibrate", None)
        if calibrate is not None:
            calibrate()
        return key_time(getattr(self.order, "latest", self.order))

    def landed(self, keys: QueueKeys, key: MsgKey) -> None:
        """A grouped message's PUT returned: a late notice if it took long, then the commit wait
        of a clock that knows S3's time only within bounds (`ServerClock.wait_past`): once
        it returns, S3's time has passed the key, so any later enqueue keys after it."""
        self.notice_if_late(keys, key)
        wait_past = getattr(self.order, "wait_past", None)
        if wait_past is not None:
            wait_past(key.sort_ms)

    def notice_if_late(self, keys: QueueKeys, key: MsgKey) -> None:
        """Put late notices until one lands within `LANDING_MS` of its key time (see module)."""
        latest = getattr(self.order, "latest", self.order)  # lateness: never underestimated
        landed_by, now = key.sort_ms, key_time(latest)
        for _ in range(MAX_NOTICES):
            if now - landed_by <= LANDING_MS:
                return
            notice = keys.msg_key(key.notice(now, new_id(now)))
            token = new_token()
            body = json.dumps({"v": 1, "token": token, "notice": keys.msg_key(key)}).encode()
            self.storage.put(notice, body, if_none_match=True, token=token)
            self.emit("late_notice", now, key=keys.msg_key(key), notice=notice)
            landed_by, now = now, key_time(latest)
        _log.warning("%s: every late notice for %s landed late", self.name, key.name())

    def put_once(
        self, keys: QueueKeys, record: Record, key: MsgKey, data: tuple[bytes, str]
    ) -> tuple[QueueKeys, MsgKey, bool]:
        """Marker first (If-None-Match), then the message: a retried enqueue finds the marker.
        The folder and key of the id's message, and whether `data` is what went in.

        A marker marked done means the message was handled: nothing to do. Otherwise the first
        call may have died between the two PUTs, so the message is put at the marker's key
        (If-None-Match: a no-op when it is there). Should it be handled and deleted between our
        read of the marker and that PUT, the worker finds the marker done and skips it; should
        it move on (a retry or released copy, a redrive), the marker names its new key and the
        worker skips the re-created one too (`markers.may_run`). A purge leaves the marker and
        deletes the message, or tombstones it if it is a copy (purging.py): the message goes
        back at the marker's key either way (`_over_tombstone`).
        """
        full = keys.msg_key(key)
        try:
            markers.create(self.storage, self.keys, record.id, full)
        except Conflict:
            found = markers.read(self.storage, self.keys, record.id)
            if found is not None and found.marker.final:  # handled, or cancelled: the id is used up
                return keys, key, False
            full = (found.marker.key if found else None) or full
            owner = self.keys.owning(full)  # the first enqueue's folder: its shard may differ
            parsed = owner.parse_msg(full)
            if parsed is not None:
                keys, key = owner, parsed
        try:
            self.create(full, data)
        except Conflict:  # the first enqueue's message is there, or a purged copy's tombstone
            if key.origin is None or not self._over_tombstone(full, data):
                return keys, key, False
        return keys, key, True

    def _over_tombstone(self, key: str, data: tuple[bytes, str]) -> bool:
        """Put `data` over a tombstone at a copy's `key` (If-Match its version): whether it
        went in. With an id's marker not final, a tombstone at its key is a purge's (apply
        moves the marker on, or marks it done, before it retires a copy), so the id is not
        handled and its message was purged. A late applier of that copy still finds the key
        taken. Only copies are tombstoned (an original is deleted): a repeated enqueue of an
        original pays no HEAD."""
        head = self.storage.head(key)
        if head is None or not self.keys.is_tombstone(key, head.size):
            return False
        try:
            self.storage.put(key, data[0], if_match=head.etag, token=data[1])
        except Conflict:  # changed since the HEAD: someone else's write, not ours to replace
            return False
        return True
