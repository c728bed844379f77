"""The queue commands of ``s3queue``: enqueue, stats, dlq list / redrive, purge, gc, delete."""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from s3queue.contract.discovery import discover_handlers
from s3queue.errors import QueueNotFound
from s3queue.local.console import Connection, UsageError, print_table
from s3queue.local.dispatchers import RECENT_MS, dispatched
from s3queue.operations import admin
from s3queue.producing.producer import Queue
from s3queue.protocol.keys import QueueKeys, check_queue_name


def parse_body(text: str, *, require_json: bool = False) -> Any:
    """A message body from the command line: JSON if it parses, else the text; @FILE reads it."""
    if text.startswith("@"):
        path = text[1:]
        try:
            data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
        except OSError as exc:
            raise UsageError(f"cannot read body file {path!r}: {exc.strerror}") from exc
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            if require_json:
                raise UsageError(f"body file {path!r} is not UTF-8 JSON") from None
            return data  # binary: enqueued as bytes
    try:
        return json.loads(text)
    except ValueError as exc:
        if require_json:
            raise UsageError(f"body is not valid JSON (--json): {exc}") from exc
        return text


def known_queues(conn: Connection, handlers: str) -> set[str]:
    """Queues with a handler module in `handlers` (if it exists) or objects in the bucket."""
    known = set(conn.queues())
    if Path(handlers).is_dir():
        known |= set(discover_handlers(handlers))
    return known


def existing_queue(conn: Connection, name: str) -> Queue:
    """The named queue; `QueueNotFound` if the bucket holds nothing of it."""
    queue = conn.queue(check_queue_name(name))
    if not admin.exists(conn.storage, queue.keys):
        raise QueueNotFound(
            f"unknown queue {name!r}: no objects under {queue.keys.root} in bucket "
            f"{conn.bucket!r} (queues there: {', '.join(conn.queues()) or 'none'})"
        )
    return queue


def parse_attributes(pairs: list[str]) -> dict[str, str]:
    """``--attr NAME=VALUE`` options as a dict (names and sizes are checked by `enqueue`)."""
    attributes: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise UsageError(f"--attr {pair!r}: use NAME=VALUE")
        attributes[name] = value
    return attributes


def cmd_enqueue(args: argparse.Namespace) -> int:
    body = parse_body(args.body, require_json=args.json)
    attributes = parse_attributes(args.attr)
    conn = Connection.open(args)
    name = check_queue_name(args.queue)
    known = known_queues(conn, args.handlers)
    if name not in known:
        listed = ", ".join(sorted(known)) or "none"
        raise QueueNotFound(
            f"unknown queue {name!r}: no handler module {args.handlers}/{name}.py and nothing "
            f"under {QueueKeys(args.prefix, name).root} (known: {listed})"
        )
    message_id = conn.queue(name).enqueue(
        body,
        id=args.id,
        delay=args.delay,
        group=args.group,
        partition=args.partition,
        attributes=attributes,
        priority=args.priority,
    )
    print(message_id)
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    conn = Connection.open(args)
    names = [args.queue] if args.queue else conn.queues()
    rows = [existing_queue(conn, name).stats() for name in names]
    if args.json:
        print(json.dumps(rows if not args.queue else rows[0], indent=2))
        return 0
    if args.partitions:
        print_table(PARTITION_COLUMNS, partition_rows(conn, rows))
        return 0
    columns: tuple[str, ...] = ("queue", "pending", "delayed", "in_flight", "dead", "tickets")
    columns += ("oldest_age_s", "paused")
    print_table(columns, [[dict(row)[c] for c in columns] for row in rows])
    warn_undispatched(conn, rows)
    return 0


def warn_undispatched(conn: Connection, rows: list[Any]) -> None:
    """On stderr: queues with messages that no coordinator led of late (one HEAD a queue).

    ``Queue("invoce")`` with a typo enqueues into a queue no handler serves; the library does
    not check (it cannot see the handlers, and a LIST per `Queue` would add a request to every
    short-lived producer), so this is where such a queue shows up.
    """
    waiting = [row["queue"] for row in rows if row["pending"] or row["delayed"]]
    if not waiting:
        return
    led = set(dispatched(conn.storage, conn.prefix, waiting, int(time.time() * 1000)))
    for name in waiting:
        if name not in led:
            print(
                f"warning: {name} has messages but no coordinator led it in the last "
                f"{RECENT_MS // 60_000} minutes: no handler serves it (a typo in a queue "
                "name?), or nothing runs for this bucket",
                file=sys.stderr,
            )


PARTITION_COLUMNS = (
    "queue",
    "partition",
    "pending",
    "delayed",
    "in_flight",
    "dead",
    "oldest_age_s",
)


def partition_rows(conn: Connection, rows: list[Any]) -> list[list[Any]]:
    """A row per partition of each queue, with its dead letters (one GET per dead letter: a
    dead letter's partition is in its record, not its key)."""
    table: list[list[Any]] = []
    for row in rows:
        dead: dict[str, int] = {}
        for entry in conn.queue(row["queue"]).dead_letters(limit=None):
            name = entry.get("partition") or ""
            dead[name] = dead.get(name, 0) + 1
        parts = row["partitions"]
        for name in sorted(set(parts) | set(dead)):
            counts = parts.get(name) or {"pending": 0, "delayed": 0, "in_flight": 0}
            table.append(
                [
                    row["queue"],
                    name or "(default)",
                    counts["pending"],
                    counts["delayed"],
                    counts["in_flight"],
                    dead.get(name, 0),
                    counts.get("oldest_age_s", 0.0),
                ]
            )
    return table


def cmd_dlq(args: argparse.Namespace) -> int:
    conn = Connection.open(args)
    queue = existing_queue(conn, args.queue)
    if args.action == "redrive":
        print(f"redrove {queue.redrive()} messages of {queue.name}")
        return 0
    entries = queue.dead_letters(limit=args.limit or None)
    if args.json:
        print(json.dumps(entries, indent=2, default=str))
        return 0
    for entry in entries:
        print(f"{entry['id']}  attempts={entry['attempts']}  {entry['reason']}")
    shown = len(entries)
    full = bool(args.limit) and shown >= args.limit
    total = admin.count_dead_letters(conn.storage, queue.keys) if full else shown
    if shown < total:
        print(f"showing {shown} of {total} dead letters in {queue.name} (--limit {args.limit})")
    else:
        print(f"{total} dead letters in {queue.name}")
    return 0


def cmd_purge(args: argparse.Namespace) -> int:
    conn = Connection.open(args)
    count = conn.queue(check_queue_name(args.queue)).purge(include_dlq=args.include_dlq)
    what = "messages and dead letters" if args.include_dlq else "messages"
    print(f"purged {count} {what} of {args.queue}")
    return 0


def cmd_gc(args: argparse.Namespace) -> int:
    conn = Connection.open(args)
    queue = existing_queue(conn, args.queue)
    found = queue.collect_orphans(grace=timedelta(hours=args.grace_hours), dry_run=args.dry_run)
    for key in found.orphans if args.dry_run else ():
        print(key)
    verb = "deleted" if found.deleted else "found"
    print(
        f"{verb} {len(found.orphans)} orphaned payloads of {queue.name} "
        f"({found.suspects} older than {args.grace_hours:g} h)"
    )
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    conn = Connection.open(args)
    count = conn.queue(check_queue_name(args.queue)).delete()
    print(f"deleted queue {args.queue} ({count} objects)")
    return 0
