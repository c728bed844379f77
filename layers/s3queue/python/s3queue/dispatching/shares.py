"""The free ticket slots of a tick, shared by tenant lane: a shard is not a tenant.

`view.prioritized_shares` gives each folder read by the tick a turn. A queue of ``shards=N``
(protocol/shards.py) has N folders per lane; shared folder by folder, a sharded partition
would get N turns for every one of an unsharded neighbour. So the slots are shared between
lanes (a partition's folder of one priority, its shards merged) as they always were between
folders, and each lane's share then goes round its shards in turn. Without shards a lane is
one folder and the answer is `prioritized_shares`'s.
"""

from __future__ import annotations

from s3queue.dispatching.view import fair_shares, prioritized_shares
from s3queue.protocol.keys import split_lane
from s3queue.protocol.shards import split_shard


def folder_shares(wanted: list[int], folders: list[str | None], capacity: int) -> list[int]:
    """Tickets for each folder (`wanted` of each, in turn order) out of `capacity`."""
    lanes: dict[str | None, list[int]] = {}
    for i, folder in enumerate(folders):
        lanes.setdefault(split_shard(folder)[0], []).append(i)
    members = list(lanes.values())
    priorities = [split_lane(lane)[1] for lane in lanes]
    totals = [sum(wanted[i] for i in at) for at in members]
    shares = [0] * len(wanted)
    for at, share in zip(members, prioritized_shares(totals, priorities, capacity), strict=True):
        for i, given in zip(at, fair_shares([wanted[i] for i in at], share), strict=True):
            shares[i] = given
    return shares
