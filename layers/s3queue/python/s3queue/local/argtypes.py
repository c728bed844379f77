"""The values of the command line's options, checked as they are parsed: a bad one is a one-line
error that says what was expected (`argparse.ArgumentTypeError`).

Apart from cli.py and command_table.py because both use them: the connection options (cli.py)
and every command's own (command_table.py).
"""

from __future__ import annotations

import argparse
from urllib.parse import urlsplit


def count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return int(text)


def hours(text: str) -> float:
    try:
        hours = float(text)
    except ValueError:
        hours = -1.0
    if not 0 <= hours <= 1e9:
        raise argparse.ArgumentTypeError(f"expected hours >= 0, got {text!r}")
    return hours


def port(text: str) -> int:
    # SeaweedFS also binds the port + 10000 (gRPC).
    if not text.isdigit() or not 1024 <= int(text) <= 65535 - 10000:
        raise argparse.ArgumentTypeError(f"expected a port from 1024 to 55535, got {text!r}")
    return int(text)


def endpoint(text: str) -> str:
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise argparse.ArgumentTypeError(
            f"expected an http(s) URL such as http://127.0.0.1:8333, got {text!r}"
        )
    return text


def positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def ui_port(text: str) -> int:
    if not text.isdigit() or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port from 0 to 65535, got {text!r}")
    return int(text)
