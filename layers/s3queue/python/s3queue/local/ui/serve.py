"""``s3queue ui`` and ``s3queue dev --ui``: the dashboard served by waitress (a WSGI server)."""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from waitress.server import create_server

from s3queue.local.console import Connection, UsageError
from s3queue.local.ui.app import create_app
from s3queue.local.ui.board import Board
from s3queue.local.ui.guard import LOOPBACK

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
THREADS = 4


class Dashboard:
    """The dashboard of one connection, listening on `host`:`port` (0: a free port)."""

    def __init__(self, conn: Connection, endpoint: str | None, host: str, port: int) -> None:
        hosts = frozenset() if host in LOOPBACK else frozenset({host})
        self.app = create_app(Board(conn, endpoint), hosts=hosts)
        try:
            self.server: Any = create_server(
                self.app, host=host, port=port, threads=THREADS, clear_untrusted_proxy_headers=True
            )
        except OSError as exc:
            raise UsageError(
                f"the dashboard cannot listen on {host}:{port}: {exc.strerror or exc} (another "
                "dashboard there? pick --ui-port PORT, or 0 for a free one)"
            ) from exc
        self.host = host

    @property
    def url(self) -> str:
        port = self.server.effective_port
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{port}/"

    def run(self) -> None:
        self.server.run()

    def close(self) -> None:
        self.server.close()


@contextmanager
def in_background(conn: Connection, endpoint: str | None, host: str, port: int) -> Iterator[str]:
    """The dashboard served by a thread while the block runs; yields its URL."""
    board = Dashboard(conn, endpoint, host, port)
    thread = threading.Thread(target=board.run, name="s3queue-ui", daemon=True)
    thread.start()
    try:
        yield board.url
    finally:
        board.close()
        thread.join(5)


def warn_if_exposed(host: str) -> None:
    if host not in LOOPBACK:
        print(
            f"warning: listening on {host}: anyone who can reach it can redrive, delete and "
            "purge (there is no login); keep it on 127.0.0.1 and use an SSH tunnel instead",
            file=sys.stderr,
        )


def cmd_ui(args: argparse.Namespace) -> int:
    """Serve the dashboard until Ctrl-C: on ``--bucket``/``--endpoint-url`` if given, else on
    the embedded S3 server of ``s3queue dev`` (its data folder in this directory)."""
    from s3queue.local.dev import DEV_BUCKET, DEV_DATA  # noqa: PLC0415 - dev imports this module

    with ExitStack() as stack:
        if args.endpoint_url or args.bucket:
            conn = Connection.open(args)
        else:
            conn = Connection.open_or_embed(args, stack, data_dir=DEV_DATA, bucket=DEV_BUCKET)
        endpoint = conn.server.endpoint_url if conn.server else args.endpoint_url
        warn_if_exposed(args.host)
        board = Dashboard(conn, endpoint, args.host, args.ui_port)
        stack.callback(board.close)
        print(f"Dashboard of bucket {conn.bucket} at {board.url} (Ctrl-C stops)", file=sys.stderr)
        board.run()
    return 0
