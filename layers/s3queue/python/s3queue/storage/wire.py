"""One HTTP/1.1 exchange on a kept-alive socket, read by hand (`transport.py` keeps the
sockets): the request's head and body out, a status line, headers and a body back, framed by
its length, by chunks or by the connection's end; and whether the socket may serve again.

`http.client` reads every answer's headers with the `email` package, a third of its CPU for a
small S3 answer; an S3 answer needs a status, a few headers and a body of a known length.
"""

from __future__ import annotations

import os
import select
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from botocore.exceptions import ReadTimeoutError

MAX_LINE = 65_536
"""The longest status or header line read (as `http.client`)."""
MAX_HEADERS = 100
"""The most header lines read (as `http.client`)."""
NO_BODY = frozenset({204, 304})
SMALL_BODY = 65_536
"""A body up to this size goes out in one send with its request's head."""


class Headers(dict[str, str]):
    """An answer's headers, their names in lower case (as every reader here asks for them)."""

    def get(self, name: str, default: Any = None) -> Any:
        return dict.get(self, name.lower(), default)


@dataclass(slots=True)
class Answer:
    """What the lean path reads of a response: botocore's `AWSResponse`'s fields it uses."""

    url: str
    status_code: int
    headers: Headers
    content: bytes


@dataclass(slots=True)
class Origin:
    """Where a URL's requests go, and the ``Host`` header they carry."""

    scheme: str
    hostname: str
    port: int
    host: str
    base: str
    """``scheme://netloc``: its connections' pool."""

    @classmethod
    def of(cls, url: str) -> Origin:
        split = urlsplit(url)
        default = 443 if split.scheme == "https" else 80
        hostname = split.hostname or ""
        port = split.port or default
        shown = f"[{hostname}]" if ":" in hostname else hostname
        host = shown if port == default else f"{shown}:{port}"
        return cls(split.scheme, hostname, port, host, url)


@dataclass(slots=True)
class Sent:
    """A request as sent: its head and body, and how to read its answer."""

    data: bytes
    body: bytes
    head_only: bool = False
    url: str = ""

    @classmethod
    def of(cls, request: Any, target: str, host: str) -> Sent:
        """A prepared request (``method``, ``url``, ``headers``, ``body``) as it goes out."""
        head = [f"{request.method} {target} HTTP/1.1", f"Host: {host}"]
        head += [f"{name}: {value}" for name, value in request.headers.items()]
        body = request.body or b""
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")
        payload = body.encode() if isinstance(body, str) else bytes(body)
        return cls(data, payload, request.method == "HEAD", request.url)


class Broken(Exception):
    """The connection failed mid-exchange: its cause is the ``__cause__``."""


class Connection:
    """One kept-alive HTTP/1.1 connection, used by one request at a time."""

    __slots__ = ("base", "pid", "reader", "sock")

    def __init__(self, sock: socket.socket, base: str = "") -> None:
        self.sock, self.base = sock, base
        self.reader = sock.makefile("rb")
        self.pid = os.getpid()

    def alive(self) -> bool:
        """Idle and still open: nothing to read (a closed connection reads as its end)."""
        if self.pid != os.getpid():
            return False
        try:
            return not readable([self.sock], 0)
        except (OSError, ValueError):
            return False

    def close(self) -> None:
        try:
            self.reader.close()
            self.sock.close()
        except OSError:
            pass

    def send(self, data: bytes, body: bytes) -> None:
        """Send a request: its head (`data`) and `body`; `Broken` when it fails."""
        try:
            if len(body) <= SMALL_BODY:
                self.sock.sendall(data + body)
            else:  # not copied into one buffer
                self.sock.sendall(data)
                self.sock.sendall(body)
        except (OSError, ValueError) as exc:
            raise Broken from exc

    def ready(self, timeout_s: float) -> bool:
        """Whether the answer has begun to arrive within `timeout_s` (without reading it)."""
        try:
            return bool(readable([self.sock], timeout_s))
        except (OSError, ValueError):
            return True  # receive says what went wrong

    def receive(self, head: bool, url: str) -> tuple[Answer, bool]:
        """Read the answer to the request sent (`head`: a HEAD's, which has no body); and
        whether the connection may be used again. `Broken` when it fails."""
        try:
            status, version = self._status()
            while 100 <= status < 200:  # an interim answer (never asked for here): skip it
                self._headers()
                status, version = self._status()
            headers = self._headers()
            content, keep = self._body(status, headers, head)
        except TimeoutError as exc:
            raise timeout_error(url, exc) from exc
        except (OSError, ValueError, Short) as exc:
            raise Broken from exc
        connection = headers.get("connection", "").lower()
        persistent = version == "HTTP/1.1" or connection == "keep-alive"
        keep = keep and connection != "close" and persistent
        return Answer(url, status, headers, content), keep

    def _line(self) -> bytes:
        line = self.reader.readline(MAX_LINE + 1)
        if len(line) > MAX_LINE:
            raise Short("line too long")
        if not line:
            raise Short("closed before the answer")
        return line

    def _status(self) -> tuple[int, str]:
        parts = self._line().split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
            raise Short(f"not a status line: {parts!r}")
        return int(parts[1]), parts[0].decode("latin-1")

    def _headers(self) -> Headers:
        headers = Headers()
        for _ in range(MAX_HEADERS + 1):
            line = self._line()
            if line in (b"\r\n", b"\n"):
                return headers
            name, sep, value = line.decode("latin-1").partition(":")
            if not sep:
                raise Short(f"not a header: {line!r}")
            name, value = name.strip().lower(), value.strip()
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        raise Short("too many headers")

    def _body(self, status: int, headers: Headers, head: bool) -> tuple[bytes, bool]:
        """The body, and whether its end was known (else the connection ends it: not kept)."""
        if head or status in NO_BODY:
            return b"", True
        if "chunked" in headers.get("transfer-encoding", "").lower():
            return self._chunked(), True
        length = headers.get("content-length")
        if length is not None:
            size = int(length)
            content = self.reader.read(size)
            if len(content) != size:
                raise Short(f"{len(content)} of {size} bytes")
            return content, True
        return self.reader.read(), False

    def _chunked(self) -> bytes:
        parts: list[bytes] = []
        while True:
            size = int(self._line().split(b";", 1)[0].strip(), 16)
            if size == 0:
                while self._line() not in (b"\r\n", b"\n"):  # trailers
                    pass
                return b"".join(parts)
            chunk = self.reader.read(size)
            if len(chunk) != size:
                raise Short(f"chunk of {len(chunk)} of {size} bytes")
            parts.append(chunk)
            self._line()


def readable(socks: list[socket.socket], timeout_s: float | None) -> list[socket.socket]:
    """Those of `socks` with something to read (an answer, or the peer's close) within
    `timeout_s` (None: no limit): by ``poll``, which takes any file number (``select``
    refuses those past 1,023, which a process with many connections reaches)."""
    if not hasattr(select, "poll"):  # pragma: no cover - not Linux nor macOS
        return select.select(socks, [], [], timeout_s)[0]
    poller = select.poll()
    by_fd = {sock.fileno(): sock for sock in socks}
    for fd in by_fd:
        poller.register(fd, select.POLLIN | select.POLLPRI | select.POLLHUP | select.POLLERR)
    events = poller.poll(None if timeout_s is None else timeout_s * 1000)
    return [by_fd[fd] for fd, _ in events]


class Short(Exception):
    """The answer ended early or was not HTTP."""


def timeout_error(url: str, exc: BaseException) -> ReadTimeoutError:
    return ReadTimeoutError(endpoint_url=url, error=exc)
