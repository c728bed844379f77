"""The ``s3queue`` command: the local runtime, enqueue, stats, the DLQ and queue admin, the demo.

Exit codes: 0 success, 1 S3 trouble (missing bucket, no credentials, unreachable endpoint,
other storage errors), 2 bad input (unknown queue, malformed body, bad option), 130 Ctrl-C.
Every error is one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from s3queue import admin
from s3queue.config import DEFAULT_PREFIX, ENV_BUCKET, ENV_ENDPOINT_URL, ENV_PREFIX, ConfigError
from s3queue.discovery import discover_handlers
from s3queue.errors import MalformedMessage, QueueNotFound, S3QueueError
from s3queue.keys import InvalidName, QueueKeys, check_queue_name
from s3queue.local.console import Connection, ProgressLine, UsageError, print_summary, print_table
from s3queue.producer import Queue

DEFAULT_HANDLERS = "functions/handlers"
DEV_BUCKET = "s3queue-dev"
DEV_DATA = ".s3queue-dev/s3"


Command = Callable[[argparse.Namespace], int]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; the exit code."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        command: Command = args.command
        return command(args)
    except (UsageError, QueueNotFound, MalformedMessage, InvalidName, ConfigError) as exc:
        return _fail(exc, 2, args.verbose)
    except S3QueueError as exc:  # StorageError and its kinds, mostly
        return _fail(exc, 1, args.verbose)
    except KeyboardInterrupt:
        print("s3queue: interrupted", file=sys.stderr)
        return 130


def _fail(exc: Exception, code: int, verbose: bool) -> int:
    """One line on stderr; details (a server's log tail) only with --verbose."""
    first, *rest = str(exc).splitlines() or [type(exc).__name__]
    more = " (more with --verbose)" if rest and not verbose else ""
    print(f"s3queue: error: {first}{more}", file=sys.stderr)
    if rest and verbose:
        print("\n".join(rest), file=sys.stderr)
    return code


def _common(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """Connection options, accepted before or after the subcommand."""

    def default(value: Any) -> Any:
        return value if top else argparse.SUPPRESS

    parser.add_argument(
        "--endpoint-url",
        default=default(os.environ.get(ENV_ENDPOINT_URL)),
        help=f"S3 endpoint, for S3-compatible servers (env {ENV_ENDPOINT_URL})",
    )
    parser.add_argument(
        "--bucket",
        default=default(os.environ.get(ENV_BUCKET)),
        help=f"the queues' bucket (env {ENV_BUCKET})",
    )
    parser.add_argument(
        "--prefix",
        default=default(os.environ.get(ENV_PREFIX) or DEFAULT_PREFIX),
        help=f"root of every queue's keys (env {ENV_PREFIX}; default {DEFAULT_PREFIX})",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="s3queue", description="Distributed worker queues backed by nothing but S3."
    )
    _common(parser, top=True)
    parser.add_argument("-v", "--verbose", action="store_true", help="log every state change")
    commands = parser.add_subparsers(title="commands", required=True, metavar="COMMAND")

    def add(name: str, command: Command, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        _common(sub, top=False)
        sub.set_defaults(command=command)
        return sub

    dev = add("dev", cmd_dev, "run the queues locally: coordinator and a worker pool")
    _runtime_options(dev)
    dev.add_argument("--drain", action="store_true", help="return once every queue is empty")
    dev.add_argument("--port", type=int, help="S3 port of the embedded server (default: free)")
    demo = add("demo", cmd_demo, "enqueue a realistic mix on an embedded S3 and run it to the end")
    _runtime_options(demo)
    enqueue = add("enqueue", cmd_enqueue, "add one message to a queue")
    enqueue.add_argument("queue")
    enqueue.add_argument("body", help="JSON if it parses, else a string; @FILE reads a file")
    enqueue.add_argument("--json", action="store_true", help="the body must be valid JSON")
    enqueue.add_argument("--id", help="message id: enqueueing the same id again is a no-op")
    enqueue.add_argument("--delay", type=float, default=0.0, help="seconds before it is visible")
    enqueue.add_argument("--group", help="messages of one group run in order, one at a time")
    enqueue.add_argument("--handlers", default=DEFAULT_HANDLERS, help="handler modules folder")
    stats = add("stats", cmd_stats, "pending, delayed, in-flight and dead messages per queue")
    stats.add_argument("queue", nargs="?")
    stats.add_argument("--json", action="store_true")
    dlq = add("dlq", cmd_dlq, "list or redrive a queue's dead letters")
    dlq.add_argument("action", choices=["list", "redrive"])
    dlq.add_argument("queue")
    dlq.add_argument("--limit", type=int, default=100)
    dlq.add_argument("--json", action="store_true")
    purge = add("purge", cmd_purge, "delete every pending message of a queue")
    purge.add_argument("queue")
    purge.add_argument("--include-dlq", action="store_true", help="empty the DLQ too")
    delete = add("delete", cmd_delete, "delete a queue: every object under its prefix")
    delete.add_argument("queue")
    return parser


def _runtime_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--handlers", default=DEFAULT_HANDLERS, help="handler modules folder")
    parser.add_argument("--workers", type=int, default=4, help="worker threads (default 4)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a setting of every queue, e.g. --set backoff_base=0.2",
    )


def overrides(pairs: list[str]) -> dict[str, float]:
    """``["backoff_base=0.2"]`` -> ``{"backoff_base": 0.2}``."""
    values: dict[str, float] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        try:
            values[key.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            raise UsageError(f"--set {pair!r}: expected KEY=NUMBER")
    return values


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


def cmd_enqueue(args: argparse.Namespace) -> int:
    body = parse_body(args.body, require_json=args.json)
    conn = Connection.open(args)
    name = check_queue_name(args.queue)
    known = known_queues(conn, args.handlers)
    if name not in known:
        listed = ", ".join(sorted(known)) or "none"
        raise QueueNotFound(
            f"unknown queue {name!r}: no handler module {args.handlers}/{name}.py and nothing "
            f"under {QueueKeys(args.prefix, name).root} (known: {listed})"
        )
    message_id = conn.queue(name).enqueue(body, id=args.id, delay=args.delay, group=args.group)
    print(message_id)
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    conn = Connection.open(args)
    names = [args.queue] if args.queue else conn.queues()
    rows = [existing_queue(conn, name).stats() for name in names]
    if args.json:
        print(json.dumps(rows if not args.queue else rows[0], indent=2))
        return 0
    columns = ("queue", "pending", "delayed", "in_flight", "dead", "tickets", "oldest_age_s")
    print_table(columns, [[row[c] for c in columns] for row in rows])
    return 0


def cmd_dlq(args: argparse.Namespace) -> int:
    queue = existing_queue(Connection.open(args), args.queue)
    if args.action == "redrive":
        print(f"redrove {queue.redrive()} messages of {queue.name}")
        return 0
    entries = queue.dead_letters(limit=args.limit)
    if args.json:
        print(json.dumps(entries, indent=2, default=str))
        return 0
    for entry in entries:
        print(f"{entry.get('id')}  attempts={entry.get('attempts')}  {entry.get('reason')}")
    print(f"{len(entries)} dead letters in {queue.name}")
    return 0


def cmd_purge(args: argparse.Namespace) -> int:
    conn = Connection.open(args)
    count = conn.queue(check_queue_name(args.queue)).purge(include_dlq=args.include_dlq)
    print(f"purged {count} objects of {args.queue}")
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    conn = Connection.open(args)
    count = conn.queue(check_queue_name(args.queue)).delete()
    print(f"deleted queue {args.queue} ({count} objects)")
    return 0


def cmd_dev(args: argparse.Namespace) -> int:
    from s3queue.local.runtime import run_local  # noqa: PLC0415 - only this command needs it

    values = overrides(args.set)
    discover_handlers(args.handlers)  # bad handler modules fail before any server starts
    with ExitStack() as stack:
        conn = Connection.open_or_embed(args, stack, data_dir=DEV_DATA, bucket=DEV_BUCKET)
        if conn.server is not None:
            print(conn.hint(args.handlers), file=sys.stderr)
        print("Running; Ctrl-C stops (a second Ctrl-C aborts).", file=sys.stderr)
        line = ProgressLine(sys.stderr)
        stop = threading.Event()
        stack.enter_context(_stop_on_interrupt(stop))
        summary = run_local(
            args.handlers,
            bucket=conn.bucket,
            s3=conn.client,
            workers=args.workers,
            drain=args.drain,
            prefix=args.prefix,
            overrides=values,
            progress=line.update,
            stop=stop,
        )
        line.close()
        print_summary(summary, sys.stdout)
    return 0


@contextmanager
def _stop_on_interrupt(stop: threading.Event) -> Iterator[None]:
    """The first Ctrl-C sets `stop` (workers finish or release their tickets); the next aborts."""

    def first(signum: int, frame: FrameType | None) -> None:
        stop.set()
        signal.signal(signal.SIGINT, previous)

    previous = signal.signal(signal.SIGINT, first)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def cmd_demo(args: argparse.Namespace) -> int:
    from s3queue.local.demo import run_demo  # noqa: PLC0415 - only this command needs it

    return run_demo(args, overrides(args.set))


if __name__ == "__main__":
    sys.exit(main())
