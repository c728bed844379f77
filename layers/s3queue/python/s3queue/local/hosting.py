"""What a local S3 server takes from the machine: free ports and an exclusive data directory."""

from __future__ import annotations

import os
import random
import socket
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO

try:
    import fcntl
except ImportError:  # not on Windows: no lock there
    fcntl = None  # type: ignore[assignment]

PORT_NAMES = ("master", "volume", "filer", "s3", "admin")
GRPC_OFFSET = 10000  # every SeaweedFS gRPC port is its HTTP port + 10000
LOCK_NAME = "s3queue.lock"


class DataDirBusy(RuntimeError):
    """Another server runs on this data directory."""


class PortBusy(OSError):
    """The S3 port asked for (or its gRPC port, + 10000) is taken."""


class DataDirLock:
    """An exclusive lock on a data directory, naming its holder's pid and endpoint."""

    def __init__(self) -> None:
        self._file: IO[str] | None = None

    def take(self, data_dir: Path) -> None:
        """Lock `data_dir`; `DataDirBusy` (with the holder's endpoint) if another has it."""
        if fcntl is None:
            return
        lock = (data_dir / LOCK_NAME).open("a+")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            owner = lock.read().split()
            lock.close()
            pid, url = [*owner, "?", "?"][:2]
            raise DataDirBusy(
                f"{data_dir} is in use by another server (pid {pid}, S3 at {url}): "
                f"stop it, or use it with --endpoint-url {url}"
            ) from None
        self._file = lock

    def record(self, endpoint_url: str) -> None:
        """Write who holds the lock, for the message of the next one who tries."""
        if self._file is not None:
            self._file.seek(0)
            self._file.truncate()
            self._file.write(f"{os.getpid()} {endpoint_url}\n")
            self._file.flush()

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing the file releases the flock
            self._file = None


def pick_ports(s3_port: int | None = None) -> dict[str, int]:
    """Free loopback ports for each server, each with its gRPC port (+10000) free too."""
    taken: set[int] = set()
    if s3_port is not None:
        taken = {s3_port, s3_port + GRPC_OFFSET}
        busy = sorted(p for p in taken if not is_free(p))
        if busy:
            raise PortBusy(
                f"port {busy[0]} is in use (by another s3queue dev?): pick another --port, "
                "or leave it out for a free one"
            )
    ports: dict[str, int] = {}
    rng = random.Random()
    for name in PORT_NAMES:
        if name == "s3" and s3_port is not None:
            ports[name] = s3_port
            continue
        # Below the kernel's ephemeral range (32768+), so that port + 10000 stays valid.
        while True:
            port = rng.randrange(15000, 30000)
            pair = {port, port + GRPC_OFFSET}
            if not pair & taken and all(is_free(p) for p in pair):
                break
        ports[name] = port
        taken |= pair
    return ports


def is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def answers(url: str) -> bool:
    """True once anything answers HTTP at `url` (an error status is an answer)."""
    try:
        with urllib.request.urlopen(url, timeout=1):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False
