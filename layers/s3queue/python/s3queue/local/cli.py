"""The ``s3queue`` command: its parser and connection options, and one line on stderr for every
error. What the commands are, and their own options: command_table.py.

Exit codes: 0 success, 1 S3 trouble (missing bucket, no credentials, unreachable endpoint,
other storage errors), 2 bad input (unknown queue, malformed body, bad option), 130 Ctrl-C,
141 the output pipe closed early (``s3queue dlq list --json | head``).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from s3queue.contract.environment import ENV_BUCKET, ENV_ENDPOINT_URL, ENV_PREFIX
from s3queue.contract.settings import DEFAULT_PREFIX
from s3queue.errors import (
    ConfigError,
    InvalidArgument,
    InvalidName,
    MalformedMessage,
    MessageNotFound,
    QueueNotFound,
    S3QueueError,
)
from s3queue.local import argtypes
from s3queue.local.command_table import Command, add_commands
from s3queue.local.console import UsageError

INTERRUPTED = 130
BROKEN_PIPE = 141


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; the exit code."""
    try:
        code = _run(argv)
        sys.stdout.flush()  # here, where a closed pipe can still be told apart
        return code
    except KeyboardInterrupt:
        print("s3queue: interrupted", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`| head`): not an error of ours. Point stdout at /dev/null so
        # the interpreter's final flush does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return BROKEN_PIPE


def _run(argv: Sequence[str] | None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help, or a bad option (already reported on one line)
        return exc.code if isinstance(exc.code, int) else 2
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        command: Command = args.command
        return command(args)
    except (
        UsageError,
        QueueNotFound,
        MessageNotFound,
        MalformedMessage,
        InvalidArgument,
        InvalidName,
        ConfigError,
    ) as exc:
        return _fail(exc, 2, args.verbose)
    except S3QueueError as exc:  # StorageError and its kinds, mostly
        return _fail(exc, 1, args.verbose)


def _fail(exc: Exception, code: int, verbose: bool) -> int:
    """One line on stderr; details (a server's log tail) only with --verbose."""
    first, *rest = str(exc).splitlines() or [type(exc).__name__]
    more = " (more with --verbose)" if rest and not verbose else ""
    print(f"s3queue: error: {first}{more}", file=sys.stderr)
    if rest and verbose:
        print("\n".join(rest), file=sys.stderr)
    return code


class _Parser(argparse.ArgumentParser):
    """Bad options are one line too, with where to read more."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"s3queue: error: {self.prog}: {message} (see {self.prog} --help)\n")


def _common(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """Connection options, accepted before or after the subcommand."""

    def default(value: Any) -> Any:
        return value if top else argparse.SUPPRESS

    parser.add_argument(
        "--endpoint-url",
        type=argtypes.endpoint,
        default=default(os.environ.get(ENV_ENDPOINT_URL) or None),
        help=f"S3 endpoint, for S3-compatible servers (env {ENV_ENDPOINT_URL}; default AWS)",
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
    parser = _Parser(
        prog="s3queue",
        description="Distributed worker queues backed by nothing but S3.",
        epilog="Exit codes: 0 ok, 1 S3 trouble, 2 bad input, 130 Ctrl-C. See docs/usage.md.",
    )
    _common(parser, top=True)
    parser.add_argument("-v", "--verbose", action="store_true", help="log every state change")
    commands_ = parser.add_subparsers(title="commands", required=True, metavar="COMMAND")

    def add(name: str, command: Command, help_text: str) -> argparse.ArgumentParser:
        sub = commands_.add_parser(name, help=help_text, description=help_text)
        _common(sub, top=False)
        sub.set_defaults(command=command)
        return sub

    add_commands(add)
    return parser


if __name__ == "__main__":
    sys.exit(main())
