"""Every key of a queue, in one place; fixed-width fields so LIST order is dispatch order.

    <prefix>/<queue>/blobs/<name>                payloads of messages too large to inline
    <prefix>/<queue>/budgets/~queue              rate-limit counter of the queue (budgets.py)
    <prefix>/<queue>/budgets/<partition>         ... of a partition (~default: the default's)
    <prefix>/<queue>/budgets/~held               what the leader holds back, and why (holds.py)
    <prefix>/<queue>/coordinator                 leader lease
    <prefix>/<queue>/dlq/<dead_ms>-<id>          dead letters
    <prefix>/<queue>/dlq/~payloads/<dead_ms>-<id>    ... their payloads (after every dead letter)
    <prefix>/<queue>/ids/<id>                    explicit-id dedup markers
    <prefix>/<queue>/inbox/<any name>            messages put by other services
    <prefix>/<queue>/inbox/<partition>/<name>    ... into a partition
    <prefix>/<queue>/msg/<sort_ms>-<id>[~attr]   messages put by the library
    <prefix>/<queue>/parts/<partition>/<sort_ms>-<id>[~attr]   ... into a partition
    <prefix>/<queue>/parts/[<partition>]~<priority>/...        ... with a priority of 1-9
    <prefix>/<queue>/tickets/<epoch>-<seq>       tickets
    <prefix>/<queue>/tickets/~controls           an operator's switches: pause (controls.py)

A *partition* (a tenant, a client) is a folder of its own: ``msg/`` is the default partition's,
``parts/<partition>/`` a named one's, with the same names inside. The leader keeps a cursor per
folder, so a partition's backlog never stands in front of another's messages (coordinator.py).
A view of the keys for one partition (`QueueKeys.partitioned`) is what the cursor, the planner
and apply.py work with; `QueueKeys.owning` finds the view of any message key.

A *priority lane* is a folder too: a message of priority N (1-9; 0, the default, is the
partition's own folder) lives in ``parts/<partition>~N/`` (``parts/~N/`` for the default
partition), and a plain PUT says it the same way (``inbox/~N/<name>``,
``inbox/<partition>~N/<name>``). ``~`` is in no partition's name, so a folder's name says both
(`split_lane`). The leader reads higher lanes first (coordinator.py); everything that works on
one folder (cursor, planner, copies, tombstones) works on a lane unchanged. `QueueKeys.partition`
is the folder's name (a lane's included); `QueueKeys.tenant` and `partition_of` the partition.

A *shard* is a sibling folder too: a queue of ``shards=N`` spreads each folder's ungrouped
messages over it and ``<folder>~s1`` .. ``<folder>~s<N-1>`` (``parts/~s1/`` for the default
partition), so that S3 can split the writes of one queue over N key ranges (shards.py).

``inbox/`` < ``msg/`` < ``parts/`` < ``tickets/`` sort together after everything else, so one
LIST starting after the ``ids/`` markers sees all live work (the idle probe). A message key's
attributes:
``~g<group>`` (base64url), ``~n<not_before_ms>``, ``~c<count>`` (a packed object of that many
messages), ``~o<epoch>-<seq>`` (written by that ticket's apply: not dispatchable while it lives),
``~p<sort_ms>-<id>-<not_before_ms>`` (a *late notice*: not a message, but a pointer to a grouped
message whose PUT landed late, put by its producer ahead of the cursor; see producer.py).
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import threading
import time
import weakref
from dataclasses import dataclass

from s3queue.common.clock import Clock, SystemClock
from s3queue.errors import InvalidArgument
from s3queue.errors import InvalidName as InvalidName  # noqa: PLC0414 - re-exported from its old home
from s3queue.protocol.shards import shard_folder, split_shard

QUEUE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
MESSAGE_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
PARTITION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
"""A partition's name: 1-64 of ``[A-Za-z0-9_.-]``, starting alnum (it is a folder's name)."""
LANE = re.compile(r"^((?:[A-Za-z0-9][A-Za-z0-9_.-]{0,63})?)~([1-9])$")
"""A priority lane's folder name: ``[<partition>]~<priority>``."""
MAX_PRIORITY = 9
_MSG = re.compile(r"^(\d{13})-([A-Za-z0-9_-]{1,160})((?:~[a-z][A-Za-z0-9_-]*)*)$")
_TICKET = re.compile(r"^(\d{10})-(\d{10})$")
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def check_queue_name(name: str) -> str:
    # fullmatch: "$" alone would let a trailing newline through.
    if not isinstance(name, str) or not QUEUE_NAME.fullmatch(name):
        raise InvalidName(f"invalid queue name {name!r}: use 1-64 of [a-z0-9_-], starting alnum")
    return name


def check_message_id(message_id: str) -> str:
    if not isinstance(message_id, str) or not MESSAGE_ID.fullmatch(message_id):
        raise InvalidName(f"invalid message id {message_id!r}: a str of 1-128 of [A-Za-z0-9_-]")
    return message_id


def check_partition(partition: str | None) -> str | None:
    if partition is not None and (
        not isinstance(partition, str) or not PARTITION.fullmatch(partition)
    ):
        raise InvalidName(
            f"invalid partition {partition!r}: use 1-64 of [A-Za-z0-9_.-], starting alnum"
        )
    return partition


def check_priority(priority: object) -> int:
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidArgument(f"priority must be an int from 0 to {MAX_PRIORITY}, got {priority!r}")
    if not 0 <= priority <= MAX_PRIORITY:
        raise InvalidArgument(f"priority must be from 0 to {MAX_PRIORITY}, got {priority}")
    return priority


def lane_name(partition: str | None, priority: int) -> str | None:
    """The folder name of `partition`'s messages of `priority` (None: the default folder)."""
    return f"{partition or ''}~{priority}" if priority else partition


def split_lane(name: str | None) -> tuple[str | None, int]:
    """(partition, priority) of a folder name (`lane_name` undone; a shard's too, shards.py)."""
    name = split_shard(name)[0]
    match = LANE.fullmatch(name) if name is not None else None
    if match is None:
        return name, 0
    return match.group(1) or None, int(match.group(2))


def is_folder_name(name: str) -> bool:
    """A partition's or a priority lane's folder name, or a shard of one (shards.py)."""
    base, shard = split_shard(name)
    if shard:
        return base is None or (split_shard(base)[1] == 0 and is_folder_name(base))
    return bool(PARTITION.fullmatch(name) or LANE.fullmatch(name))


class _IdGenerator:
    """ULID-like ids: 48-bit ms time + 80 bits, monotonic within a process, sortable."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = 0
        # A forked child starts afresh: its parent's last id would otherwise make two children
        # of one millisecond both return `_last + 1`, and a lock held at the fork by another
        # thread of the parent would never be released in the child.
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._last = 0

    def new(self, now_ms: int | None = None) -> str:
        with self._lock:
            value = ((now_ms or time.time_ns() // 1_000_000) << 80) | int.from_bytes(
                os.urandom(10), "big"
            )
            value = max(value, self._last + 1)
            self._last = value
        return "".join(_CROCKFORD[(value >> shift) & 31] for shift in range(125, -1, -5))


new_id = _IdGenerator().new


class _KeyClock:
    """The time a producer writes into its keys: its clock, never below the highest reading
    of that clock in this process (every thread, every queue). A wall clock that steps back (an
    NTP correction) would otherwise key a group's later message before its earlier one. Every
    `SystemClock` reads one wall clock, so they share one mark; an injected clock has its own.
    A forked child inherits the marks, which is still right: its keys follow the parent's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._marks: weakref.WeakKeyDictionary[object, int] = weakref.WeakKeyDictionary()

    def stamp(self, clock: Clock) -> int:
        owner: object = SystemClock if isinstance(clock, SystemClock) else clock
        now = clock.now_ms()
        if not getattr(clock, "calibrated", True):
            return now  # a clock of S3's time before S3 told it: no mark (servertime.py)
        with self._lock:
            mark = max(self._marks.get(owner, 0), now)
            self._marks[owner] = mark
            return mark


key_time = _KeyClock().stamp
"""`clock`'s time, raised to its high-water mark: the time of every key a producer writes."""


@dataclass(frozen=True, slots=True)
class MsgKey:
    """The parsed name of a ``msg/`` object."""

    sort_ms: int
    id: str
    group: str | None = None
    not_before_ms: int = 0
    count: int = 1
    origin: str | None = None
    target: str | None = None
    """A late notice's target: ``<sort_ms>-<id>-<not_before_ms>`` of a message of its group."""

    @property
    def ready_ms(self) -> int:
        return max(self.sort_ms, self.not_before_ms)

    def notice(self, now_ms: int, notice_id: str) -> MsgKey:
        """A late notice for this (grouped) message, keyed at `now_ms`."""
        return MsgKey(
            now_ms,
            notice_id,
            self.group,
            target=f"{self.sort_ms:013d}-{self.id}-{self.not_before_ms}",
        )

    def target_key(self) -> MsgKey | None:
        """The message a late notice points at; None for any other key."""
        if self.target is None:
            return None
        sort_ms, message_id, not_before = self.target.split("-")
        return MsgKey(int(sort_ms), message_id, self.group, int(not_before))

    def name(self) -> str:
        parts = [f"{self.sort_ms:013d}-{self.id}"]
        if self.group is not None:
            parts.append("g" + encode_group(self.group))
        if self.not_before_ms:
            parts.append(f"n{self.not_before_ms}")
        if self.count != 1:
            parts.append(f"c{self.count}")
        if self.origin:
            parts.append("o" + self.origin)
        if self.target:
            parts.append("p" + self.target)
        return "~".join(parts)


def encode_group(group: str) -> str:
    return base64.urlsafe_b64encode(group.encode()).decode().rstrip("=")


def _decode_group(text: str) -> str:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()


def parse_msg_name(name: str) -> MsgKey | None:
    """The key's fields, or None for a name the library did not write (a foreign object)."""
    match = _MSG.match(name)
    if not match:
        return None
    fields: dict[str, str] = {}
    for attr in match.group(3).split("~")[1:]:
        fields[attr[0]] = attr[1:]
    try:
        return MsgKey(
            sort_ms=int(match.group(1)),
            id=match.group(2),
            group=_decode_group(fields["g"]) if "g" in fields else None,
            not_before_ms=int(fields.get("n", "0")),
            count=int(fields.get("c", "1")),
            origin=fields.get("o"),
            target=_check_target(fields.get("p")),
        )
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return None


_TARGET = re.compile(r"^\d{13}-[0-9A-Z]{26}-\d+$")


def _check_target(text: str | None) -> str | None:
    if text is not None and not _TARGET.match(text):
        raise ValueError(f"not a late notice's target: {text!r}")
    return text


def ticket_name(epoch: int, seq: int) -> str:
    return f"{epoch:010d}-{seq:010d}"


def parse_ticket_name(name: str) -> tuple[int, int] | None:
    match = _TICKET.match(name)
    return (int(match.group(1)), int(match.group(2))) if match else None


@dataclass(frozen=True, slots=True)
class QueueKeys:
    """The keys of one queue."""

    prefix: str
    queue: str
    partition: str | None = None
    """Whose messages `msg` and the message helpers below mean: None is the default
    partition (``msg/``), else ``parts/<partition>/`` (a lane's name too: ``acme~9``, ``~9``).
    Every other folder is the queue's."""

    @property
    def root(self) -> str:
        return f"{self.prefix}/{self.queue}/"

    @property
    def parts(self) -> str:
        """The folder of the named partitions' folders."""
        return self.root + "parts/"

    def partitioned(self, partition: str | None) -> QueueKeys:
        """These keys with `msg` in `partition`'s folder (None: the default partition)."""
        if partition == self.partition:
            return self
        return QueueKeys(self.prefix, self.queue, partition)

    @property
    def tenant(self) -> str | None:
        """The partition these keys are of (`partition` without its priority)."""
        return split_lane(self.partition)[0]

    @property
    def priority(self) -> int:
        return split_lane(self.partition)[1]

    def sharded(self, shard: int) -> QueueKeys:
        """These keys in `shard` of the same folder (shards.py; 0: the folder itself)."""
        return self.partitioned(shard_folder(split_shard(self.partition)[0], shard))

    def prioritized(self, priority: int) -> QueueKeys:
        """These keys in the lane of `priority` of the same partition."""
        return self.partitioned(lane_name(self.tenant, priority))

    def lane_of(self, key: str) -> str | None:
        """The folder of a full message key: ``parts/<f>/...`` and ``inbox/<f>/<name>`` are
        `f`'s (a partition's or a lane's name, with something after it); else the default's."""
        for folder in (self.parts, self.inbox):
            if key.startswith(folder):
                name, slash, rest = key[len(folder) :].partition("/")
                if slash and rest and is_folder_name(name):
                    return name
        return None

    def partition_of(self, key: str) -> str | None:
        """The partition of a full message key (its lane's, for a message with a priority)."""
        return split_lane(self.lane_of(key))[0]

    def owning(self, key: str) -> QueueKeys:
        """The view of the folder (partition or lane) that a message or inbox key is in."""
        return self.partitioned(self.lane_of(key))

    @property
    def lease(self) -> str:
        return self.root + "coordinator"

    def budget(self, partition: str | None, *, whole: bool = False) -> str:
        """The rate-limit counter (`s3queue.protocol.budgets`) of the whole queue, or of
        `partition` (None: the default one). Before ``ids/``: never seen as work."""
        name = "~queue" if whole else (partition or "~default")
        return f"{self.root}budgets/{name}"

    @property
    def holds(self) -> str:
        """What the leader holds back, and why (`s3queue.protocol.holds`)."""
        return f"{self.root}budgets/~held"

    @property
    def controls(self) -> str:
        """The operator's switches (`s3queue.protocol.controls`): beside the tickets, after
        them all (``~`` sorts after digits), so the LIST of tickets that starts every tick
        shows whether it changed, at no extra request. Never a ticket, nor work."""
        return self.tickets + "~controls"

    @property
    def inbox(self) -> str:
        return self.root + "inbox/"

    @property
    def msg(self) -> str:
        if self.partition is None:
            return self.root + "msg/"
        return f"{self.parts}{self.partition}/"

    @property
    def tickets(self) -> str:
        return self.root + "tickets/"

    @property
    def dlq(self) -> str:
        return self.root + "dlq/"

    @property
    def ids(self) -> str:
        return self.root + "ids/"

    @property
    def live_start(self) -> str:
        """LIST from after this key to see inbox/, msg/ and tickets/ in one request.

        It sorts after every ``ids/`` marker (ids are ``[A-Za-z0-9_-]``, all below ``~``) and
        before ``inbox`` (then ``msg/``, ``parts/``, ``tickets/``). Never a folder's bare name
        such as ``inbox``: SeaweedFS skips the whole folder of a StartAfter that names it (see
        `S3Storage.list`).
        """
        return self.ids + "~"

    def is_tombstone(self, key: str, size: int) -> bool:
        """An emptied ``msg/`` or ``dlq/`` object (`model.TOMBSTONE`): a consumed copy's
        (apply.py) or a redriven dead letter's (admin.py); never a message. Any partition's."""
        return size == 0 and key.startswith((self.root + "msg/", self.parts, self.dlq))

    def parse_msg(self, key: str) -> MsgKey | None:
        """The fields of a full ``msg/`` key; None for any other key or a foreign name."""
        return parse_msg_name(key[len(self.msg) :]) if key.startswith(self.msg) else None

    def parse_ticket(self, key: str) -> tuple[int, int] | None:
        """(epoch, seq) of a full ``tickets/`` key; None for any other key."""
        return parse_ticket_name(key[len(self.tickets) :]) if key.startswith(self.tickets) else None

    def ticket_origin(self, key: str) -> str:
        """A full ``tickets/`` key's name, as a copy's origin (``~o``) spells it."""
        return key[len(self.tickets) :]

    def msg_key(self, key: MsgKey) -> str:
        return self.msg + key.name()

    def msg_after(self, sort_ms: int) -> str:
        """A start_after that lists messages with sort_ms >= the given time."""
        return self.msg + f"{max(sort_ms, 0):013d}"

    def ticket(self, epoch: int, seq: int) -> str:
        return self.tickets + ticket_name(epoch, seq)

    def dead(self, dead_ms: int, message_id: str) -> str:
        return self.dlq + f"{dead_ms:013d}-{message_id}"

    def dead_id(self, key: str) -> str | None:
        """The message id of a ``dlq/<dead_ms>-<id>`` key; None for any other key."""
        name = key[len(self.dlq) :] if key.startswith(self.dlq) else ""
        stamp, dash, message_id = name.partition("-")
        return message_id if dash and len(stamp) == 13 and stamp.isdigit() else None

    @property
    def dead_payloads(self) -> str:
        """Dead letters' payloads: under ``dlq/`` so the DLQ's lifecycle rule expires them with
        their dead letters; ``~`` sorts after every dead letter's name (digits)."""
        return self.dlq + "~payloads/"

    def dead_payload(self, dead_key: str) -> str:
        """The payload key of the dead letter at `dead_key`."""
        return self.dead_payloads + dead_key[len(self.dlq) :]

    def is_dead_payload(self, key: str) -> bool:
        return key.startswith(self.dead_payloads)

    @property
    def blobs(self) -> str:
        """Payloads (`enqueue_file`, retried large inbox objects); sorts before every live
        folder, so the idle probe never sees them."""
        return self.root + "blobs/"

    def blob(self, name: str) -> str:
        return self.blobs + name

    def marker(self, message_id: str) -> str:
        return self.ids + message_id
