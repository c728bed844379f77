"""``s3queue dev`` and ``s3queue demo``: the local runtime on the command line."""

from __future__ import annotations

import argparse
import functools
import json
import shlex
import shutil
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from pathlib import Path
from types import FrameType

from s3queue.contract.discovery import discover_handlers
from s3queue.contract.settings import CoordinatorSettings
from s3queue.local.console import Connection, ProgressLine, UsageError, print_summary
from s3queue.local.dispatchers import DispatcherWatch
from s3queue.local.hosting import LOCK_NAME, alive, answers, preferred_port
from s3queue.local.monitor import retry_unreachable
from s3queue.local.reloading import run_reloading
from s3queue.local.runtime import LOCAL_COORDINATION, RunSummary, run_local
from s3queue.local.seaweed import ANY_CREDENTIALS

DEFAULT_HANDLERS = "functions/handlers"
DEV_BUCKET = "s3queue-dev"
DEV_DATA = ".s3queue-dev/s3"
INTERRUPTED = 130
EXAMPLE_BODIES = {
    "send_email": {"to": "ada@example.com", "template": "welcome", "name": "Ada"},
}
"""A body the example handlers accept; any other queue's example is ``{"hello": "world"}``."""


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


def cmd_worker(args: argparse.Namespace) -> int:
    """`s3queue worker`: like `dev`, but dispatching nothing (one of a fleet of workers)."""
    return cmd_dev(args, coordinate=False)


def cmd_dev(args: argparse.Namespace, *, coordinate: bool = True) -> int:
    values = overrides(args.set)
    queues = sorted(discover_handlers(args.handlers))  # bad modules fail before any server
    stop = threading.Event()
    with ExitStack() as stack:
        interrupted = stack.enter_context(_stop_on_interrupt(stop))
        conn = _connect(args, stack, stop)
        if conn is None:
            return INTERRUPTED
        if conn.server is not None:
            print(hint(conn, args.handlers, queues), file=sys.stderr)
        if getattr(args, "ui", False):
            _serve_ui(args, conn, stack)
        reload = bool(getattr(args, "reload", False))
        print(
            "Running; Ctrl-C stops (a second Ctrl-C aborts). "
            + (
                "Handler modules reload when one changes."
                if reload
                else "Handler modules are loaded once: restart after editing one (or --reload)."
            ),
            file=sys.stderr,
        )
        if not coordinate:
            _watch_dispatchers(conn, args.prefix, queues, stop)
        line = ProgressLine(sys.stderr)
        run = functools.partial(_run, args, conn, values, line, coordinate)
        summary = run_reloading(run, Path(args.handlers), stop, _note) if reload else run(stop)
        line.close()
        print_summary(summary, sys.stdout)
    return INTERRUPTED if interrupted.is_set() else 0


def _serve_ui(args: argparse.Namespace, conn: Connection, stack: ExitStack) -> None:
    """``dev --ui``: the dashboard on the same connection, served while `dev` runs."""
    try:
        from s3queue.local.ui.serve import in_background, warn_if_exposed  # noqa: PLC0415
    except ImportError as exc:
        raise UsageError(f"--ui needs the ui extra: pip install 's3queue[ui]' ({exc})") from exc
    endpoint = conn.server.endpoint_url if conn.server else args.endpoint_url
    warn_if_exposed(args.host)
    url = stack.enter_context(in_background(conn, endpoint, args.host, args.ui_port))
    print(f"Dashboard at {url}", file=sys.stderr)


def _run(
    args: argparse.Namespace,
    conn: Connection,
    values: dict[str, float],
    line: ProgressLine,
    coordinate: bool,
    stop: threading.Event,
) -> RunSummary:
    """One run of the local runtime until `stop` (or drained, with --drain)."""
    return run_local(
        args.handlers,
        bucket=conn.bucket,
        s3=conn.client,
        workers=args.workers,
        drain=args.drain,
        prefix=args.prefix,
        overrides=values,
        progress=line.update,
        # Each report counts the queue (a LIST per folder, a GET per changed ticket): off a
        # terminal, no more often than the line may print.
        progress_interval=1.0 if line.tty else line.interval,
        stop=stop,
        coordination=_coordination(args) if coordinate else LOCAL_COORDINATION,
        coordinate=coordinate,
    )


def _note(text: str) -> None:
    print(f"\n{text}", file=sys.stderr)


def _watch_dispatchers(
    conn: Connection, prefix: str, queues: list[str], stop: threading.Event
) -> None:
    """`s3queue worker` warns while nothing dispatches its queues (`DispatcherWatch`)."""
    watch = DispatcherWatch(
        conn.storage, prefix, queues, lambda text: print(text, file=sys.stderr), bucket=conn.bucket
    )
    watch.start(stop)


def _coordination(args: argparse.Namespace) -> CoordinatorSettings:
    """The local lease settings with `dev`'s --lease-ttl and --skew-tolerance."""
    return replace(LOCAL_COORDINATION, lease_ttl=args.lease_ttl, skew_tolerance=args.skew_tolerance)


def _connect(
    args: argparse.Namespace, stack: ExitStack, stop: threading.Event
) -> Connection | None:
    """The embedded server, or ``--endpoint-url`` waited for while unreachable; None if stopped."""
    if not args.endpoint_url:
        moved = adopt_nested_data(Path(DEV_DATA))
        if moved:
            print(f"Moved {moved} data of an earlier version up into {DEV_DATA}.", file=sys.stderr)
        return Connection.open_or_embed(args, stack, data_dir=DEV_DATA, bucket=DEV_BUCKET)
    opened: list[Connection] = []
    if not retry_unreachable(lambda: opened.append(Connection.open(args)), stop, wait=True):
        return None
    return opened[0]


def adopt_nested_data(data_dir: Path) -> int:
    """Move a server's files from ``<data_dir>/<DEV_DATA>`` up into `data_dir`; how many.

    Earlier versions started SeaweedFS in `data_dir` with a relative ``-dir``, so its files
    landed in ``.s3queue-dev/s3/.s3queue-dev/s3``. Nothing is moved over a file of the same
    name: a `data_dir` that has data of its own keeps it, and the nested copy stays.
    """
    nested = data_dir / DEV_DATA
    if not nested.is_dir() or (data_dir / "filerldb2").exists():
        return 0
    moved = 0
    for entry in sorted(nested.iterdir()):
        if not (data_dir / entry.name).exists():
            entry.rename(data_dir / entry.name)
            moved += 1
    if not any(nested.iterdir()):
        shutil.rmtree(data_dir / Path(DEV_DATA).parts[0])
    return moved


def cmd_env(args: argparse.Namespace) -> int:
    """`s3queue env`: export lines for this folder's embedded S3 (``eval "$(s3queue env)"``)."""
    data = Path(DEV_DATA).resolve()
    url = running_endpoint(data) or f"http://127.0.0.1:{preferred_port(data)}"
    key, secret = ANY_CREDENTIALS
    for name, value in (
        ("S3QUEUE_ENDPOINT_URL", url),
        ("AWS_ENDPOINT_URL_S3", url),
        ("S3QUEUE_BUCKET", args.bucket or DEV_BUCKET),
        ("AWS_ACCESS_KEY_ID", key),
        ("AWS_SECRET_ACCESS_KEY", secret),
        ("AWS_REGION", "us-east-1"),
    ):
        print(f"export {name}={shlex.quote(value)}")
    if not answers(url):
        print(
            f"# no s3queue dev serves this folder now; started here, it will listen at {url}",
            file=sys.stderr,
        )
    return 0


def running_endpoint(data_dir: Path) -> str | None:
    """The endpoint the lock file of `data_dir` names, if its holder is alive."""
    try:
        fields = (data_dir / LOCK_NAME).read_text().split()
    except OSError:
        return None
    if len(fields) >= 2 and fields[0].isdigit() and alive(int(fields[0])):
        return fields[1]
    return None


@contextmanager
def _stop_on_interrupt(stop: threading.Event) -> Iterator[threading.Event]:
    """The first Ctrl-C sets `stop` (workers finish or release their tickets); the next aborts.
    SIGTERM (a container's stop, Kubernetes', ECS') stops the same clean way.

    Yields an event that tells whether Ctrl-C was pressed.
    """
    interrupted = threading.Event()

    def first(signum: int, frame: FrameType | None) -> None:
        interrupted.set()
        stop.set()
        signal.signal(signal.SIGINT, previous)

    def terminate(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = signal.signal(signal.SIGINT, first)
    previous_term = signal.signal(signal.SIGTERM, terminate)
    try:
        yield interrupted
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.signal(signal.SIGTERM, previous_term)


def command_name() -> str:
    """How to run this command again from another shell of this machine."""
    if shutil.which("s3queue"):
        return "s3queue"
    script = Path(sys.executable).parent / "s3queue"
    if script.is_file():
        try:
            return str(script.relative_to(Path.cwd()))
        except ValueError:
            return str(script)
    return f"{sys.executable} -m s3queue.local.cli"


def hint(conn: Connection, handlers: str, queues: list[str]) -> str:
    """How to reach the embedded server from another shell: the CLI, awscli, any SDK."""
    assert conn.server is not None
    url = conn.server.endpoint_url
    key, secret = ANY_CREDENTIALS
    queue = "send_email" if "send_email" in queues else (queues or ["QUEUE"])[0]
    body = shlex.quote(json.dumps(EXAMPLE_BODIES.get(queue, {"hello": "world"})))
    folder = shlex.quote(str(Path(handlers).resolve()))
    return (
        f"Embedded S3 at {url}, bucket {conn.bucket} (data in {DEV_DATA}; the port stays "
        "with this folder). From another shell in this folder:\n"
        f'  eval "$({command_name()} env)"   # or: export S3QUEUE_ENDPOINT_URL={url} '
        f"AWS_ENDPOINT_URL_S3={url} S3QUEUE_BUCKET={conn.bucket} AWS_ACCESS_KEY_ID={key} "
        f"AWS_SECRET_ACCESS_KEY={secret} AWS_REGION=us-east-1\n"
        f"  {command_name()} enqueue --handlers {folder} {queue} {body}\n"
        f"  aws s3 ls --recursive s3://{conn.bucket}/{conn.prefix}/   # awscli, or any SDK"
    )


def cmd_demo(args: argparse.Namespace) -> int:
    from s3queue.local.demo import run_demo  # noqa: PLC0415 - only this command needs it

    return run_demo(args, overrides(args.set))
