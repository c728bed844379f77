"""What the command line shows and connects to: the bucket connection, progress, tables."""

from __future__ import annotations

import argparse
import os
import shutil
import time
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from s3queue.errors import EndpointUnreachable, S3QueueError
from s3queue.producing.producer import Queue
from s3queue.storage.clients import make_client
from s3queue.storage.s3 import S3Storage

if TYPE_CHECKING:
    from s3queue.local.runtime import RunSummary
    from s3queue.local.seaweed import EmbeddedS3

CLI_POOL = 1024
"""Connections the command line's client may keep: the most a runtime it hands the client to
makes at once (`local.runtime.connections`: per queue its read lanes, 32 to 128 by the worker
threads, and its publications; 2 a worker thread), with room to spare (4 queues and 128
threads: 840). A cap, not a cost: connections open on demand."""


class UsageError(S3QueueError):
    """Bad input on the command line (exit code 2)."""


@dataclass
class Connection:
    """One bucket through one boto3 client; `server` when it is an embedded S3 of ours."""

    client: Any
    storage: S3Storage
    bucket: str
    prefix: str
    server: EmbeddedS3 | None = None

    @classmethod
    def open(cls, args: argparse.Namespace) -> Connection:
        """The bucket of ``--bucket`` at ``--endpoint-url``, checked with one LIST."""
        if not args.bucket:
            raise UsageError("no bucket: pass --bucket NAME or set S3QUEUE_BUCKET")
        # Few SDK retries: an unreachable endpoint should fail in about a second, not minutes.
        client = make_client(
            args.endpoint_url, sdk_retries=2, connect_timeout=3, max_pool_connections=CLI_POOL
        )
        return cls.checked(client, args.bucket, args.prefix)

    @classmethod
    def checked(
        cls, client: Any, bucket: str, prefix: str, server: EmbeddedS3 | None = None
    ) -> Connection:
        """A connection whose bucket answered a LIST (else BucketNotFound, AccessDenied, ...)."""
        S3Storage(client, bucket, attempts=1).list(f"{prefix}/", limit=1)
        return cls(client, S3Storage(client, bucket), bucket, prefix, server)

    @classmethod
    def open_or_embed(
        cls, args: argparse.Namespace, stack: ExitStack, *, data_dir: str | None, bucket: str
    ) -> Connection:
        """``--endpoint-url`` if given; else an embedded SeaweedFS, stopped when `stack` closes."""
        if args.endpoint_url:
            return cls.open(args)
        from s3queue.local.seaweed import EmbeddedS3  # noqa: PLC0415 - only without an endpoint

        server = EmbeddedS3(data_dir=data_dir, s3_port=getattr(args, "port", None))
        try:
            stack.enter_context(server)
        except (OSError, RuntimeError) as exc:
            raise EndpointUnreachable(f"the embedded S3 server did not start: {exc}") from exc
        name = args.bucket or bucket
        server.create_bucket(name)
        return cls.checked(
            server.make_client(max_pool_connections=CLI_POOL), name, args.prefix, server
        )

    def queue(self, name: str) -> Queue:
        return Queue(name, storage=self.storage, prefix=self.prefix)

    def queues(self) -> list[str]:
        """The queues that have objects in the bucket: one LIST of one key per queue.

        Folders starting with ``_`` are not queues (``_idempotency/`` holds records).
        """
        root, names = f"{self.prefix}/", list[str]()
        start: str | None = None
        while True:
            page = self.storage.list(root, start_after=start, limit=1)
            if not page.entries:
                return names
            key = page.entries[0].key
            name, slash, _ = key[len(root) :].partition("/")
            if slash and not name.startswith("_"):
                names.append(name)
            # "0" sorts right after "/": the next LIST skips every key of this queue.
            start = f"{root}{name}0" if slash else key


def terminal_width(stream: TextIO) -> int:
    """The columns of the terminal `stream` writes to (not stdout's: that may be a pipe)."""
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return shutil.get_terminal_size().columns


def fit(snapshot: dict[str, dict[str, int]], width: int) -> str:
    """The most detailed description of `snapshot` that fits in `width` columns."""
    for text in (describe(snapshot), describe_short(snapshot), describe_total(snapshot)):
        if len(text) <= width:
            return text
    return text[: max(0, width - 3)] + "..."


def describe_short(snapshot: dict[str, dict[str, int]]) -> str:
    """Per queue ``name p<pending>+<delayed> f<in flight> ok<done> x<DLQ>``."""
    return " | ".join(
        f"{name} p{s['pending']}+{s['delayed']} f{s['in_flight']} ok{s['processed']} x{s['dlq']}"
        for name, s in snapshot.items()
    )


def describe_total(snapshot: dict[str, dict[str, int]]) -> str:
    """Every queue summed: how many queues, pending, in flight, done, DLQ."""
    total = {
        k: sum(s[k] for s in snapshot.values())
        for k in ("pending", "in_flight", "processed", "dlq")
    }
    return (
        f"{len(snapshot)} queues: {total['pending']} pending, {total['in_flight']} in flight, "
        f"{total['processed']} done, {total['dlq']} DLQ"
    )


def describe(snapshot: dict[str, dict[str, int]]) -> str:
    """One line: per queue pending (delayed), in flight, done and DLQ."""
    parts = []
    for name, s in snapshot.items():
        delayed = f" (+{s['delayed']} delayed)" if s["delayed"] else ""
        parts.append(
            f"{name}: {s['pending']} pending{delayed}, {s['in_flight']} in flight, "
            f"{s['processed']} done, {s['dlq']} DLQ"
        )
    return " | ".join(parts)


class ProgressLine:
    """Live progress: a line redrawn in place on a terminal, else a line per change (throttled)."""

    def __init__(self, stream: TextIO, interval: float = 2.0) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.interval = interval
        self.started = time.monotonic()
        self.printed_at = float("-inf")
        self.last = ""
        self.shown = ""

    def update(self, snapshot: dict[str, dict[str, int]]) -> None:
        now = time.monotonic()
        elapsed = f"[{now - self.started:5.1f}s] "
        self.last = elapsed + describe(snapshot)
        if self.tty:
            # One column spare: a line that fills the last column wraps on some terminals.
            width = terminal_width(self.stream) - 1
            line = elapsed + fit(snapshot, width - len(elapsed))
            self.stream.write("\r" + line + "\x1b[K")
            self.stream.flush()
            self.shown = self.last
        elif now - self.printed_at >= self.interval and self._changed():
            self._line(now)

    def _changed(self) -> bool:
        """Whether the state (not only the elapsed time) differs from the last printed line."""
        return self.last.partition("] ")[2] != self.shown.partition("] ")[2]

    def close(self) -> None:
        """End the live line; print the latest state if it was not shown yet."""
        if self.tty and self.shown:
            self.stream.write("\n")
        elif not self.tty and self.last and self._changed():
            self._line(time.monotonic())
        self.stream.flush()

    def _line(self, now: float) -> None:
        self.stream.write(self.last + "\n")
        self.stream.flush()
        self.printed_at, self.shown = now, self.last


def print_table(
    columns: tuple[str, ...], rows: list[list[Any]], stream: TextIO | None = None
) -> None:
    """Columns left-aligned for text, right-aligned for numbers."""
    cells = [list(columns), *[[str(v) for v in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    numeric = [all(isinstance(row[i], int | float) for row in rows) for i in range(len(columns))]
    for row in cells:
        line = "  ".join(
            cell.rjust(w) if num else cell.ljust(w)
            for cell, w, num in zip(row, widths, numeric, strict=True)
        )
        print(line.rstrip(), file=stream)


def print_summary(summary: RunSummary, stream: TextIO) -> None:
    """Per-queue counts, then every dead letter with its last error."""
    state = "drained" if summary.drained else "stopped"
    print(f"\n{state} after {summary.elapsed:.1f} s", file=stream)
    columns = ("queue", "processed", "failed", "retried", "dead_lettered", "redelivered", "dlq")
    rows: list[list[Any]] = []
    for name, t in summary.queues.items():
        dlq = summary.stats[name]["dead"]
        rows.append([name, t.processed, t.failed, t.retried, t.dead_lettered, t.redelivered, dlq])
    print_table(columns, rows, stream)
    for name, entries in summary.dead_letters.items():
        for entry in entries:
            print(
                f"DLQ {name}/{entry.get('id')}: {entry.get('attempts')} attempts, "
                f"last error: {entry.get('reason')}",
                file=stream,
            )
