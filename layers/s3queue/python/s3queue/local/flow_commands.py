"""The flow-control commands of ``s3queue``: pause and resume a queue."""

from __future__ import annotations

import argparse

from s3queue.errors import QueueNotFound
from s3queue.local.commands import known_queues
from s3queue.local.console import Connection
from s3queue.producing.producer import Queue
from s3queue.protocol.keys import check_queue_name


def _known_queue(args: argparse.Namespace) -> Queue:
    """The named queue, if it has a handler module or objects in the bucket (a typo must not
    quietly store a switch nobody reads)."""
    conn = Connection.open(args)
    name = check_queue_name(args.queue)
    known = known_queues(conn, args.handlers)
    if name not in known:
        raise QueueNotFound(
            f"unknown queue {name!r}: no handler module {args.handlers}/{name}.py and no "
            f"objects of it in bucket {conn.bucket!r} (known: {', '.join(sorted(known)) or 'none'})"
        )
    return conn.queue(name)


def cmd_pause(args: argparse.Namespace) -> int:
    queue = _known_queue(args)
    queue.pause()
    print(f"paused {queue.name}: enqueues are accepted, nothing new is dispatched")
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    queue = _known_queue(args)
    queue.resume()
    print(f"resumed {queue.name}")
    return 0
