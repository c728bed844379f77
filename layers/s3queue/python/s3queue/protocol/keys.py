"""Every key of a queue, in one place; fixed-width fields so LIST order is dispatch order.

    <prefix>/<queue>/blobs/<name>                payloads of messages too large to inline
    <prefix>/<queue>/budgets/~queue              rate-limit counter of the queue (budgets.py)
    <prefix>/<queue>/budgets/<partition>         ... of a partition (~default: the default's)
    <prefix>/<queue>/budgets/~held               what the leader holds back, and why (holds.py)
    <prefix>/<queue>/chain/<epoch>-<seq>         the ticket parked behind that one (tickets.py)
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

The names inside the folders are `msgnames`'s, the ids and times in them `ids`'s, what a
user may name (queues, ids, partitions, lanes) `naming`'s; this module re-exports them.

A *partition* (a tenant, a client) is a folder of its own: ``msg/`` is the default partition's,
``parts/<partition>/`` a named one's, with the same names inside. The leader keeps a cursor per
folder, so a partition's backlog never stands in front of another's messages (folders.py).
A view of the keys for one partition (`QueueKeys.partitioned`) is what the cursor, the planner
and apply.py work with; `QueueKeys.owning` finds the view of any message key.

A *priority lane* is a folder too: a message of priority N (1-9; 0, the default, is the
partition's own folder) lives in ``parts/<partition>~N/`` (``parts/~N/`` for the default
partition), and a plain PUT says it the same way (``inbox/~N/<name>``,
``inbox/<partition>~N/<name>``). ``~`` is in no partition's name, so a folder's name says both
(`split_lane`). The leader reads higher lanes first (folders.py); everything that works on
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

from dataclasses import dataclass, field

from s3queue.contract import names
from s3queue.errors import InvalidName as InvalidName  # noqa: PLC0414 - re-exported from its old home
from s3queue.protocol.ids import key_time, new_id
from s3queue.protocol.msgnames import (
    MsgKey,
    encode_group,
    parse_msg_name,
    parse_ticket_name,
    ticket_name,
)
from s3queue.protocol.naming import (
    LANE,
    MAX_PRIORITY,
    MESSAGE_ID,
    PARTITION,
    QUEUE_NAME,
    check_message_id,
    check_partition,
    check_priority,
    check_queue_name,
    is_folder_name,
    lane_name,
    split_lane,
)
from s3queue.protocol.shards import shard_folder, split_shard

__all__ = [
    "LANE",
    "MAX_PRIORITY",
    "MESSAGE_ID",
    "PARTITION",
    "QUEUE_NAME",
    "InvalidName",
    "MsgKey",
    "QueueKeys",
    "check_message_id",
    "check_partition",
    "check_priority",
    "check_queue_name",
    "encode_group",
    "is_folder_name",
    "key_time",
    "lane_name",
    "new_id",
    "parse_msg_name",
    "parse_ticket_name",
    "split_lane",
    "ticket_name",
]


@dataclass(frozen=True, slots=True)
class QueueKeys:
    """The keys of one queue."""

    prefix: str
    queue: str
    partition: str | None = None
    """Whose messages `msg` and the message helpers below mean: None is the default
    partition (``msg/``), else ``parts/<partition>/`` (a lane's name too: ``acme~9``, ``~9``).
    Every other folder is the queue's."""
    root: str = field(init=False, repr=False, compare=False)
    """The queue's folder; it and the three below are built once (a busy coordinator asks for
    them hundreds of thousands of times a minute)."""
    parts: str = field(init=False, repr=False, compare=False)
    """The folder of the named partitions' folders."""
    inbox: str = field(init=False, repr=False, compare=False)
    msg: str = field(init=False, repr=False, compare=False)
    """The folder of `partition`'s messages."""

    def __post_init__(self) -> None:
        root = names.queue_root(self.prefix, self.queue)
        parts = root + names.PARTS
        msg = root + names.MSG if self.partition is None else f"{parts}{self.partition}/"
        folders = {"root": root, "parts": parts, "inbox": root + names.INBOX, "msg": msg}
        for name, value in folders.items():
            object.__setattr__(self, name, value)  # frozen: set once, here

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
        return self.root + names.LEASE

    def budget(self, partition: str | None, *, whole: bool = False) -> str:
        """The rate-limit counter (`s3queue.protocol.budgets`) of the whole queue, or of
        `partition` (None: the default one). Before ``ids/``: never seen as work."""
        name = "~queue" if whole else (partition or "~default")
        return f"{self.root}budgets/{name}"

    def chain(self, ticket_key: str) -> str:
        """Where the leader puts the invocation of the ticket it parked behind the ticket
        `ticket_key` (`Ticket.after`), for that ticket's worker to take next. Before
        ``ids/``: never seen as work."""
        return f"{self.root}chain/{self.ticket_origin(ticket_key)}"

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
    def tickets(self) -> str:
        return self.root + names.TICKETS

    @property
    def dlq(self) -> str:
        return self.root + names.DLQ

    @property
    def ids(self) -> str:
        return self.root + names.IDS

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
        return size == 0 and key.startswith((self.root + names.MSG, self.parts, self.dlq))

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
