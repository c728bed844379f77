"""What a local S3 server takes from the machine: free ports and an exclusive data directory."""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import signal
import socket
import time
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
PORT_NAME = "s3queue.port"
"""The S3 port a kept data directory's server used last: the next one asks for it again."""
PORT_RANGE = (15000, 30000)
"""Below the kernel's ephemeral range (32768+), so that port + 10000 stays valid."""
STALE_WAIT = 15.0
"""How long a server left by a killed process may take to stop before it is killed."""


class DataDirBusy(RuntimeError):
    """Another server runs on this data directory."""


class PortBusy(OSError):
    """The S3 port asked for (or its gRPC port, + 10000) is taken."""


class DataDirLock:
    """An exclusive lock on a data directory, naming its holder's pid and endpoint."""

    def __init__(self) -> None:
        self._file: IO[str] | None = None

    def take(self, data_dir: Path) -> int | None:
        """Lock `data_dir`; `DataDirBusy` (with the holder's endpoint) if another has it.

        Returns the pid of the server the last holder started, when that holder is gone (the
        lock was free) but its server may still run: a ``kill -9`` of ``s3queue dev`` leaves
        its SeaweedFS stopping for a few seconds, holding the directory's files and ports.
        """
        if fcntl is None:
            return None
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
        lock.seek(0)
        fields = lock.read().split()
        server = fields[2] if len(fields) > 2 and fields[2].isdigit() else None
        return int(server) if server is not None else None

    def record(self, endpoint_url: str, server_pid: int | None = None) -> None:
        """Write who holds the lock (and its server's pid), for the next one who tries."""
        if self._file is not None:
            self._file.seek(0)
            self._file.truncate()
            server = f" {server_pid}" if server_pid is not None else ""
            self._file.write(f"{os.getpid()} {endpoint_url}{server}\n")
            self._file.flush()

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing the file releases the flock
            self._file = None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_server_of(pid: int, data_dir: Path) -> bool:
    """Whether `pid` runs a server on `data_dir` (its command line names it), where it can be
    told (Linux); elsewhere, whether it is alive."""
    cmdline = Path(f"/proc/{pid}/cmdline")
    if not cmdline.parent.is_dir():
        return alive(pid)
    try:
        words = cmdline.read_bytes().split(b"\0")
    except OSError:
        return False
    return f"-dir={data_dir}".encode() in words


def stop_stale_server(pid: int, data_dir: Path, wait: float = STALE_WAIT) -> bool:
    """Wait for a killed holder's server on `data_dir` to stop, then kill it; True if one ran.

    Polls, bounded: this is start-up, not work waiting for work.
    """
    if not is_server_of(pid, data_dir):
        return False
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and is_server_of(pid, data_dir):
        time.sleep(0.1)
    if is_server_of(pid, data_dir):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and is_server_of(pid, data_dir):
            time.sleep(0.1)
    return True


def preferred_port(data_dir: Path) -> int:
    """The S3 port for a kept data directory: the one it used last, else one its path picks."""
    try:
        text = (data_dir / PORT_NAME).read_text().strip()
    except OSError:
        text = ""
    if text.isdigit() and PORT_RANGE[0] <= int(text) < PORT_RANGE[1]:
        return int(text)
    digest = hashlib.sha256(str(data_dir.resolve()).encode()).digest()
    low, high = PORT_RANGE
    return low + int.from_bytes(digest[:4], "big") % (high - low)


def remember_port(data_dir: Path, port: int) -> None:
    (data_dir / PORT_NAME).write_text(f"{port}\n")


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
        while True:
            port = rng.randrange(*PORT_RANGE)
            pair = {port, port + GRPC_OFFSET}
            if not pair & taken and all(is_free(p) for p in pair):
                break
        ports[name] = port
        taken |= pair
    return ports


def is_free(port: int) -> bool:
    """Whether a server could listen on `port` now. As servers do (SeaweedFS too), with
    SO_REUSEADDR: a port whose last connections linger in TIME_WAIT is free."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def ports_free(ports: tuple[int, ...], *, wait: float = 0.0) -> bool:
    """Whether all `ports` are free, polling up to `wait` seconds (bounded start-up polling).

    A server's process can look gone (on Linux its command line empties when its main thread
    exits) while its other threads still hold its sockets: after a stale server stops, its
    ports free up a moment later, later still on a loaded machine.
    """
    deadline = time.monotonic() + wait
    while not all(is_free(port) for port in ports):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
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
