"""The command table: every subcommand of ``s3queue``, with the function that runs it, its help
and its options.

Apart from cli.py because that module is how a command runs (the parser's shape, the
connection options every command takes, errors to exit codes), and this one what the
commands are; a new command is a line here and a ``cmd_*`` function in its own module.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from s3queue.local import argtypes, commands, dev, flow_commands, messages, schedule_commands
from s3queue.local.console import UsageError
from s3queue.local.runtime import LOCAL_COORDINATION

Command = Callable[[argparse.Namespace], int]
Add = Callable[[str, Command, str], argparse.ArgumentParser]


def _dev_commands(add: Add) -> None:
    run = add("dev", dev.cmd_dev, "run the queues locally: coordinator and a worker pool")
    _runtime_options(run)
    run.add_argument("--drain", action="store_true", help="return once every queue is empty")
    run.add_argument(
        "--port", type=argtypes.port, help="S3 port of the embedded server (default: a free one)"
    )
    _reload_option(run)
    _lease_options(run)
    _ui_options(run, flag=True)
    work = add(
        "worker",
        dev.cmd_worker,
        "work the queues' tickets without dispatching: one of a fleet beside `s3queue dev`",
    )
    _runtime_options(work)
    work.add_argument("--drain", action="store_true", help="return once every queue is empty")
    work.add_argument(
        "--port", type=argtypes.port, help="S3 port of the embedded server (default: a free one)"
    )
    _reload_option(work)
    demo = add("demo", dev.cmd_demo, "enqueue a realistic mix on an embedded S3, run it to the end")
    _runtime_options(demo)
    add(
        "env",
        dev.cmd_env,
        'export lines for this folder\'s `s3queue dev` server: eval "$(s3queue env)"',
    )


def _reload_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--reload",
        action="store_true",
        help="run again with fresh handler modules when a file of --handlers changes",
    )


def _lease_options(parser: argparse.ArgumentParser) -> None:
    default = LOCAL_COORDINATION
    parser.add_argument(
        "--lease-ttl",
        type=argtypes.positive,
        default=default.lease_ttl,
        metavar="SECONDS",
        help=f"leader lease: a dead leader is replaced about this long (by S3's clock) after "
        f"its last renewal (default {default.lease_ttl:g}; renewed every third of it)",
    )
    parser.add_argument(
        "--skew-tolerance",
        type=argtypes.positive,
        default=default.skew_tolerance,
        metavar="SECONDS",
        help=f"clock skew allowed between hosts, for leases written by versions before S3's "
        f"clock judged expiry (default {default.skew_tolerance:g})",
    )


def _queue_commands(add: Add) -> None:
    queue_help = "the queue's name (its handler module's file name)"
    enqueue = add("enqueue", commands.cmd_enqueue, "add one message to a queue")
    enqueue.add_argument("queue", help=queue_help)
    enqueue.add_argument("body", help="JSON if it parses, else a string; @FILE reads a file")
    enqueue.add_argument("--json", action="store_true", help="the body must be valid JSON")
    enqueue.add_argument("--id", help="message id: enqueueing the same id again is a no-op")
    enqueue.add_argument("--delay", type=float, default=0.0, help="seconds before it is visible")
    enqueue.add_argument("--group", help="messages of one group run in order, one at a time")
    enqueue.add_argument(
        "--partition", help="a tenant or client: partitions are served fairly, side by side"
    )
    enqueue.add_argument(
        "--priority",
        type=int,
        default=0,
        metavar="N",
        help="0 (default) to 9: higher ones start first (not with --group)",
    )
    enqueue.add_argument(
        "--attr",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an attribute (message.attributes); repeat for more",
    )
    enqueue.add_argument("--handlers", default=dev.DEFAULT_HANDLERS, help="handler modules folder")
    stats = add("stats", commands.cmd_stats, "pending, delayed, in-flight and dead messages")
    stats.add_argument("queue", nargs="?", help="one queue (default: every queue in the bucket)")
    stats.add_argument("--json", action="store_true", help="JSON instead of a table")
    stats.add_argument(
        "--partitions", action="store_true", help="a row per partition of each queue"
    )
    dlq = add("dlq", messages.cmd_dlq, "list, show, redrive or delete a queue's dead letters")
    dlq.add_argument(
        "action",
        choices=["list", "show", "redrive", "delete"],
        help="list them; show one in full (--id); redrive to the queue or delete (--id, or all)",
    )
    dlq.add_argument("queue", help=queue_help)
    _dead_letter_options(dlq)
    dlq.add_argument(
        "--limit",
        type=argtypes.count,
        default=100,
        metavar="N",
        help="list at most N, oldest first (0: all)",
    )
    dlq.add_argument(
        "--json", action="store_true", help="JSON, one schema (docs/usage.md#dead-letters)"
    )
    purge = add("purge", commands.cmd_purge, "delete every pending and delayed message")
    purge.add_argument("queue", help=queue_help)
    purge.add_argument("--include-dlq", action="store_true", help="empty the DLQ too")
    gc = add("gc", commands.cmd_gc, "delete stored payloads that no message refers to any more")
    gc.add_argument("queue", help=queue_help)
    gc.add_argument(
        "--grace-hours",
        type=argtypes.hours,
        default=7 * 24.0,
        metavar="H",
        help="only payloads older than this: longer than any upload takes (default 168)",
    )
    gc.add_argument("--dry-run", action="store_true", help="list the orphans, delete nothing")
    delete = add("delete", commands.cmd_delete, "delete a queue: every object under its prefix")
    delete.add_argument("queue", help=queue_help)


def _dead_letter_options(dlq: argparse.ArgumentParser) -> None:
    """`dlq show|redrive|delete --id ID`: one dead letter at a time."""
    dlq.add_argument(
        "--id",
        dest="ids",
        action="append",
        metavar="ID",
        help="the dead letter's message id (repeat for more): show, redrive or delete only it",
    )
    dlq.add_argument(
        "--all", action="store_true", help="with delete and no --id: delete every dead letter"
    )


def _message_commands(add: Add) -> None:
    """One message at a time: peek at waiting messages, cancel one by its explicit id."""
    peek = add("peek", messages.cmd_peek, "show the first waiting messages without taking them")
    peek.add_argument("queue", help="the queue's name")
    peek.add_argument(
        "-n", "--limit", type=argtypes.count, default=10, metavar="N", help="at most N (default 10)"
    )
    peek.add_argument("--json", action="store_true", help="JSON: bodies and attributes in full")
    cancel = add(
        "cancel",
        messages.cmd_cancel,
        "cancel a pending or delayed message enqueued with an explicit id: it never runs",
    )
    cancel.add_argument("queue", help="the queue's name")
    cancel.add_argument("id", help="the id given at enqueue (--id)")


def _ui_commands(add: Add) -> None:
    """``s3queue ui``, and ``--ui`` on ``dev``."""
    ui = add(
        "ui",
        _cmd_ui,
        "a web dashboard of the bucket's queues (the embedded S3 of `dev` if no bucket given)",
    )
    _ui_options(ui)


def _ui_options(parser: argparse.ArgumentParser, *, flag: bool = False) -> None:
    """The dashboard's address; with `flag`, the ``--ui`` switch (of ``dev``) too."""
    if flag:
        parser.add_argument("--ui", action="store_true", help="serve the web dashboard too")
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="the dashboard's address (default 127.0.0.1: this machine only)",
    )
    parser.add_argument(
        "--ui-port",
        type=argtypes.ui_port,
        default=8765,
        metavar="PORT",
        help="the dashboard's port (default 8765; 0: a free one)",
    )


def _cmd_ui(args: argparse.Namespace) -> int:
    # The web stack (Flask, waitress) is an extra: loaded only by this command.
    try:
        from s3queue.local.ui.serve import cmd_ui  # noqa: PLC0415
    except ImportError as exc:
        raise UsageError(
            f"the dashboard needs the ui extra: pip install 's3queue[ui]' ({exc})"
        ) from exc
    return cmd_ui(args)


def _flow_commands(add: Add) -> None:
    queue_help = "the queue's name (its handler module's file name)"
    for name, command, text in (
        ("pause", flow_commands.cmd_pause, "dispatch nothing new (enqueues are still accepted)"),
        ("resume", flow_commands.cmd_resume, "dispatch again after `s3queue pause`"),
    ):
        sub = add(name, command, text)
        sub.add_argument("queue", help=queue_help)
        sub.add_argument("--handlers", default=dev.DEFAULT_HANDLERS, help="handler modules folder")
    schedules = add(
        "schedules",
        schedule_commands.cmd_schedules,
        "list each scheduled queue's next slots (read from the handler modules; no bucket)",
    )
    schedules.add_argument(
        "--handlers", default=dev.DEFAULT_HANDLERS, help="handler modules folder"
    )
    schedules.add_argument(
        "--next", type=argtypes.count, default=3, metavar="N", help="slots per queue (default 3)"
    )


def _runtime_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--handlers", default=dev.DEFAULT_HANDLERS, help="handler modules folder")
    parser.add_argument(
        "--workers", type=argtypes.count, default=4, metavar="N", help="worker threads (default 4)"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a setting of every queue, e.g. --set backoff_base=0.2",
    )


def add_commands(add: Add) -> None:
    """Every subcommand, through `add` (cli.py's: it gives each the connection options)."""
    _dev_commands(add)
    _queue_commands(add)
    _message_commands(add)
    _ui_commands(add)
    _flow_commands(add)
