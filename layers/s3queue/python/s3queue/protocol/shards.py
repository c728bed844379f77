"""Shards: one folder's ungrouped messages spread over sibling folders (issue 22, item 2).

S3 serves at least 3,500 writes a second per partitioned prefix and splits a busy prefix's
key range in two when it stays busy (docs/performance.md, "What it assumes about AWS").
Message keys are time-ordered, so every enqueue of one folder writes at the tail of one key
range: one S3 partition, whatever S3 splits. A queue of ``shards=N`` gives each of its
message folders N-1 siblings, ``<folder>~s<k>`` for k in 1..N-1 (shard 0 is the folder itself,
so ``shards=1`` is the layout of before, and a queue that grows keeps its old messages where
they are)::

    msg/...                 parts/~s1/...  parts/~s2/...        the default partition
    parts/acme/...          parts/acme~s1/...                   partition acme
    parts/acme~9/...        parts/acme~9~s1/...                 its lane of priority 9

Each sibling ends in ``/``, so it is a contiguous key range of its own with its own tail: S3
can split the queue's writes N ways. A sibling is an ordinary folder to everything that works
on one (cursor, planner, copies, tombstones), as a lane is; ``~`` is in no partition's name,
so the name says it (`split_shard`), and ``partition_of``/``tenant`` drop it: a shard is not
a tenant.

A *grouped* message never shards: it goes to shard 0, its folder of before. A group's FIFO
order rests on one cursor reading all its messages in key order (docs/protocol.md, "FIFO
groups"); hashing groups over shards would keep that only while every producer agrees on N,
and a change of N (or a rolling deploy) would put one group in two folders read by two
cursors. Partitions already spread grouped traffic over prefixes.
"""

from __future__ import annotations

import itertools
import random
import re

from s3queue.errors import InvalidArgument

MAX_SHARDS = 64
"""Siblings per folder at most: each costs the leader one LIST per tick while it holds work."""
_SHARD = re.compile(r"^(.*)~s([1-9][0-9]?)$")


def check_shards(shards: object) -> int:
    if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= MAX_SHARDS:
        raise InvalidArgument(f"shards must be an int from 1 to {MAX_SHARDS}, got {shards!r}")
    return shards


def shard_folder(folder: str | None, shard: int) -> str | None:
    """The folder name of `shard` of `folder` (a partition's or lane's; None: the default)."""
    return folder if shard == 0 else f"{folder or ''}~s{shard}"


def split_shard(name: str | None) -> tuple[str | None, int]:
    """(folder, shard) of a folder name (`shard_folder` undone); shard 0 for any other name."""
    match = _SHARD.fullmatch(name) if name else None
    if match is None:
        return name, 0
    return match.group(1) or None, int(match.group(2))


class Spread:
    """Which shard a producer puts a message in: round-robin over `shards`, from a random start
    (so that many processes do not all begin at shard 0); a grouped message in shard 0.

    ``next()`` on an `itertools.count` is atomic under the GIL: threads need no lock, and a
    forked child keeps counting from its parent's place (any start spreads as well)."""

    def __init__(self, shards: int = 1) -> None:
        self.shards = check_shards(shards)
        self._turn = itertools.count(random.randrange(self.shards))

    def pick(self, group: str | None) -> int:
        if self.shards == 1 or group is not None:
            return 0
        return next(self._turn) % self.shards
