"""The one-message commands of ``s3queue``: ``dlq show|redrive|delete --id``, ``peek``,
``cancel``; ``dlq list`` and ``dlq redrive`` of a whole queue are `commands.cmd_dlq`."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

from s3queue.errors import AlreadyDispatched, MessageNotFound
from s3queue.local import commands
from s3queue.local.console import Connection, UsageError, print_table
from s3queue.protocol.deadletters import DeadLetter

TOO_LATE = 3
"""Exit code of a cancel that lost its race: the message was already dispatched or handled."""
BODY_COLUMN = 60


def cmd_dlq(args: argparse.Namespace) -> int:
    """``dlq ACTION QUEUE``: show and delete here, and redrive by id; the rest in commands."""
    if args.action in ("show", "delete") or args.ids:
        return cmd_dlq_by_id(args)
    if args.all:
        raise UsageError("--all goes with dlq delete")
    return commands.cmd_dlq(args)


def cmd_dlq_by_id(args: argparse.Namespace) -> int:
    ids: list[str] = args.ids or []
    if args.action == "list":
        raise UsageError("dlq list takes no --id: use dlq show QUEUE --id ID")
    if args.action == "show" and not ids:
        raise UsageError("dlq show needs --id ID (dlq list shows them all)")
    if args.action == "delete" and not ids and not args.all:
        raise UsageError("dlq delete needs --id ID, or --all to delete every dead letter")
    if ids and args.all:
        raise UsageError("give --id or --all, not both")
    conn = Connection.open(args)
    queue = commands.existing_queue(conn, args.queue)
    if args.action == "show":
        return _show(queue.name, [queue.dead_letter(i) for i in ids], ids, args.json)
    if args.action == "redrive":
        moved = queue.redrive(ids=ids)
        _all_found(queue.name, moved, ids)
        print(f"redrove {moved} messages of {queue.name}")
        return 0
    deleted = queue.delete_dead(ids=ids or None)
    if ids:
        _all_found(queue.name, deleted, ids)
    print(f"deleted {deleted} dead letters of {queue.name}")
    return 0


def _all_found(queue: str, count: int, ids: list[str]) -> None:
    if count < len(set(ids)):
        raise MessageNotFound(
            f"{len(set(ids)) - count} of the ids given have no dead letter in {queue} "
            f"(s3queue dlq list {queue} lists them)"
        )


def _show(queue: str, found: list[DeadLetter | None], ids: list[str], as_json: bool) -> int:
    missing = [i for i, d in zip(ids, found, strict=True) if d is None]
    if missing:
        raise MessageNotFound(f"no dead letter with id {', '.join(missing)} in {queue}")
    letters = [d for d in found if d is not None]
    if as_json:
        print(json.dumps(letters if len(letters) > 1 else letters[0], indent=2, default=str))
        return 0
    for letter in letters:
        describe_dead_letter(letter, sys.stdout)
    return 0


def when(ms: int | None) -> str:
    """Epoch milliseconds as an ISO UTC time (or -)."""
    if not isinstance(ms, int):
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")


def describe_dead_letter(letter: DeadLetter, out: TextIO) -> None:
    """A dead letter in full: its message, then every failed delivery with its traceback."""
    print(f"dead letter {letter['id']} of {letter['queue']}  ({letter['key']})", file=out)
    print(
        f"  partition: {letter['partition'] or '-'}  group: {letter['group'] or '-'}  "
        f"attempts: {letter['attempts']}  enqueued: {when(letter['enqueued_ms'])}  "
        f"dead: {when(letter['dead_ms'])}",
        file=out,
    )
    attrs = ", ".join(f"{k}={v}" for k, v in sorted(letter["attributes"].items()))
    print(f"  attributes: {attrs or '-'}", file=out)
    print(f"  reason: {letter['reason']}", file=out)
    print(f"  body ({letter['body_encoding']}): {_body(letter)}", file=out)
    for entry in letter["errors"]:
        print(f"  attempt {entry['attempt']} at {when(entry['at'])}: {entry['error']}", file=out)
        trace = entry.get("traceback")
        for line in (trace or "(no traceback kept)").rstrip("\n").splitlines():
            print(f"      {line}", file=out)


def _body(item: Any) -> str:
    if item["body_encoding"] == "payload":
        payload = item["payload"] or {}
        return f"stored payload {payload.get('key')} ({payload.get('size')} bytes)"
    return json.dumps(item["body"], ensure_ascii=False)


def cmd_peek(args: argparse.Namespace) -> int:
    conn = Connection.open(args)
    queue = commands.existing_queue(conn, args.queue)
    found = queue.peek(args.limit)
    if args.json:
        print(json.dumps(found, indent=2, default=str))
        return 0
    heads = ("id", "state", "partition", "group", "attempt", "ready", "body")
    rows = [
        [
            m["id"],
            m["state"],
            m["partition"] or "-",
            m["group"] or "-",
            m["attempt"],
            when(m["ready_ms"]),
            _cut(_body(m), BODY_COLUMN),
        ]
        for m in found
    ]
    print_table(heads, rows)
    print(f"{len(found)} messages shown of {queue.name} (first in key order; -n for more)")
    return 0


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def cmd_cancel(args: argparse.Namespace) -> int:
    conn = Connection.open(args)
    queue = commands.existing_queue(conn, args.queue)
    try:
        cancelled = queue.cancel(args.id)
    except AlreadyDispatched as exc:
        print(f"s3queue: too late: {exc}", file=sys.stderr)
        return TOO_LATE
    if cancelled:
        print(f"cancelled {args.id} in {queue.name}: it will not run")
    else:
        print(f"{args.id} in {queue.name} was already cancelled")
    return 0
