"""The lean path's HTTP/1.1 exchange: one request on a kept-alive connection, read by hand.

botocore's `URLLib3Session.send` was most of a lean call's client CPU: 0.37-0.53 ms of this
machine's CPU for a small GET against SeaweedFS, where `Transport.send` takes 0.12-0.16 (side
by side, session 21): urllib3's pool and request machinery, then `http.client`, which parses
every answer's headers with the `email` package, then botocore's case-insensitive header dict.
A small S3 call needs none of it: one request line, a few headers, a status line, a few headers
back, a body of a known length (wire.py reads them). `Transport` sends on a socket (TLS when
the URL says https), with the session's own settings: its timeouts, its
pool size, its certificate check and its socket options, and it raises botocore's errors for
each failure, as the session does, so that the lean path's retries and the fault injectors
see the same thing either way.

`transport_of` keeps botocore's session where this would differ: a proxy (configured or in
the environment), a client certificate, or a session of another kind.

Connections: per origin, a stack of idle ones (at most the session's pool size; extra ones,
opened when more requests are in flight, are closed after use). One found readable before
reuse has been closed by the server (or holds what nobody asked for): dropped, as urllib3
does. A process forked with idle connections does not use them: they are the parent's.
"""

from __future__ import annotations

import os
import socket
import ssl
import threading
import time
import urllib.request
import weakref
from dataclasses import dataclass, field
from typing import Any, cast

from botocore.exceptions import (
    BotoCoreError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    HTTPClientError,
    SSLError,
)
from botocore.httpsession import URLLib3Session, get_cert_path

from s3queue.storage.hedging import Hedging
from s3queue.storage.wire import Answer, Broken, Connection, Origin, Sent, Short, readable

DRAIN_TIMEOUT_S = 1.0
"""How long a lost race's answer, once it has begun to arrive, is waited for to the end."""


@dataclass
class Transport:
    """One client's connections and how they are made (`transport_of`)."""

    connect_timeout: float | None
    read_timeout: float | None
    pool_size: int
    verify: bool | str
    socket_options: list[tuple[int, int, int]] = field(default_factory=list)
    _idle: dict[str, list[Connection]] = field(default_factory=dict)
    _origins: dict[str, Origin] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _context: ssl.SSLContext | None = None
    _pid: int = field(default_factory=os.getpid)
    hedging: Hedging = field(default_factory=Hedging)
    raced: int = 0
    """Reads raced by a second copy (each one more request to S3)."""
    _draining: list[tuple[Connection, bool, float]] = field(default_factory=list)
    """Connections whose answer lost a race, to read and drop: with HEAD's flag and until
    when it is waited for."""

    def send(self, request: Any, operation: str | None = None) -> Answer:
        """Send a prepared request (``method``, ``url``, ``headers``, ``body``): its answer,
        its body read in full; botocore's error for each way it can fail. A read named by
        its `operation` is raced by a second copy once it is slow (hedging.py)."""
        url: str = request.url
        origin, target = self._split(url)
        sent = Sent.of(request, target, origin.host)
        after = self.hedging.after_ms(operation) if operation is not None else None
        started = time.monotonic()
        conn, other = self._take(origin, url), None
        try:
            conn.send(sent.data, sent.body)
            if after is not None and not conn.ready(after / 1000):
                conn, other = self._race(origin, conn, sent)
            conn, other, answer, keep = self._first_answer(conn, other, sent)
        except BaseException as exc:
            for used in (conn, other):
                if used is not None:
                    used.close()
            if isinstance(exc, Broken):
                # Also a kept connection the server closed just as we sent: botocore's
                # session gives that error to its caller too (urllib3 does not retry it).
                raise _translate(exc.__cause__, url) from exc.__cause__
            raise
        if other is not None:
            with self._lock:
                deadline = time.monotonic() + (self.read_timeout or 60.0)
                self._draining.append((other, sent.head_only, deadline))
        if operation is not None:
            elapsed = (time.monotonic() - started) * 1000
            self.hedging.observe(operation, elapsed, raced=other is not None)
        self._done(conn, keep)
        return answer

    def _first_answer(
        self, conn: Connection, other: Connection | None, sent: Sent
    ) -> tuple[Connection, Connection | None, Answer, bool]:
        """The answer to use: `conn`'s; if it breaks or fails (5xx) while a raced `other` is
        out, the other's. With the connection it came on, the one still out, and whether
        the connection may be kept."""
        try:
            answer, keep = conn.receive(sent.head_only, sent.url)
        except Broken:
            if other is None:
                raise
            conn.close()
            conn, other = other, None
            answer, keep = conn.receive(sent.head_only, sent.url)
            return conn, None, answer, keep
        if other is not None and answer.status_code >= 500:
            try:
                second, second_keep = other.receive(sent.head_only, sent.url)
            except Broken:  # the 5xx it is, for the caller's retries
                other.close()
                return conn, None, answer, keep
            self._done(conn, keep)
            return other, None, second, second_keep
        return conn, other, answer, keep

    def _done(self, conn: Connection, keep: bool) -> None:
        """A connection whose answer was read: kept (`_give`) if it may serve again."""
        if keep:
            self._give(conn)
        else:
            conn.close()

    def _race(
        self, origin: Origin, first: Connection, sent: Sent
    ) -> tuple[Connection, Connection | None]:
        """The connection whose answer to `sent` begins first, and the other one: `first`
        and a second copy of the request sent now on another connection. `first` alone if
        the second cannot be sent."""
        try:
            second = self._take(origin, sent.url)
        except BotoCoreError:
            return first, None
        try:
            second.send(sent.data, sent.body)
        except Broken:
            second.close()
            return first, None
        with self._lock:
            self.raced += 1
        try:
            ready = readable([first.sock, second.sock], self.read_timeout)
        except (OSError, ValueError):
            ready = [first.sock]
        return (second, first) if ready == [second.sock] else (first, second)

    def _drain(self) -> None:
        """Read and drop the answers that lost a race and have arrived (their connections go
        back to the pool); close those past the read timeout. Caller holds no lock."""
        with self._lock:
            due, self._draining = self._draining, []
        now, waiting = time.monotonic(), []
        for conn, head_only, deadline in due:
            if conn.pid != os.getpid():
                continue
            if not conn.ready(0):
                if now < deadline:
                    waiting.append((conn, head_only, deadline))
                else:
                    conn.close()
                continue
            try:  # begun: the rest is near, but a stalled one is not waited for long
                conn.sock.settimeout(DRAIN_TIMEOUT_S)
                _, keep = conn.receive(head_only, "")
                conn.sock.settimeout(self.read_timeout)
            except (Broken, BotoCoreError, OSError):
                keep = False
            self._done(conn, keep)
        if waiting:
            with self._lock:
                self._draining.extend(waiting)

    def close(self) -> None:
        """Close every idle connection."""
        with self._lock:
            idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn in conns:
                conn.close()

    def forget(self) -> None:
        """Drop the idle connections without a word to their servers (after a fork: the
        parent's)."""
        with self._lock:
            self._idle, self._draining, self._pid = {}, [], os.getpid()

    def _split(self, url: str) -> tuple[Origin, str]:
        """`url`'s origin (kept per scheme, host and port) and its request target."""
        slash = url.find("/", url.index("://") + 3)
        base, target = (url, "/") if slash < 0 else (url[:slash], url[slash:])
        origin = self._origins.get(base)
        if origin is None:
            origin = self._origins[base] = Origin.of(base)
        return origin, target

    def _take(self, origin: Origin, url: str) -> Connection:
        if self._draining:
            self._drain()
        with self._lock:
            if self._pid != os.getpid():
                self._idle, self._draining, self._pid = {}, [], os.getpid()
            idle = self._idle.get(origin.base)
            while idle:
                conn = idle.pop()
                if conn.alive():
                    return conn
                conn.close()
        return self._connect(origin, url)

    def _give(self, conn: Connection) -> None:
        """Back to its origin's idle ones (at most `pool_size`), else closed."""
        with self._lock:
            idle = self._idle.setdefault(conn.base, [])
            if len(idle) < self.pool_size and conn.pid == self._pid:
                idle.append(conn)
                return
        conn.close()

    def _connect(self, origin: Origin, url: str) -> Connection:
        try:
            sock = socket.create_connection(
                (origin.hostname, origin.port), timeout=self.connect_timeout
            )
        except TimeoutError as exc:
            raise ConnectTimeoutError(endpoint_url=url, error=exc) from exc
        except OSError as exc:
            raise EndpointConnectionError(endpoint_url=url, error=exc) from exc
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for level, name, value in self.socket_options:
                sock.setsockopt(level, name, value)
            if origin.scheme == "https":
                sock = self._tls().wrap_socket(sock, server_hostname=origin.hostname)
            sock.settimeout(self.read_timeout)
        except ssl.SSLError as exc:
            sock.close()
            raise SSLError(endpoint_url=url, error=exc) from exc
        except TimeoutError as exc:
            sock.close()
            raise ConnectTimeoutError(endpoint_url=url, error=exc) from exc
        except OSError as exc:
            sock.close()
            raise EndpointConnectionError(endpoint_url=url, error=exc) from exc
        return Connection(sock, origin.base)

    def _tls(self) -> ssl.SSLContext:
        if self._context is None:
            context = ssl.create_default_context()
            if self.verify is False:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            else:
                context.load_verify_locations(cafile=get_cert_path(self.verify))
            self._context = context
        return self._context


def _translate(cause: BaseException | None, url: str) -> BotoCoreError:
    """botocore's error for a failed exchange, as its session raises it."""
    if isinstance(cause, ssl.SSLError):
        return cast(BotoCoreError, SSLError(endpoint_url=url, error=cause))
    if isinstance(cause, OSError | Short | ValueError):
        return cast(BotoCoreError, ConnectionClosedError(endpoint_url=url, error=cause))
    return cast(BotoCoreError, HTTPClientError(error=cause))


_transports: weakref.WeakKeyDictionary[Any, Transport] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def transport_of(session: Any) -> Any:
    """What sends a lean call for botocore's `session`: a `Transport` with its settings, or
    the session itself when a transport would not do as it does (a proxy, a client
    certificate, a session of another kind, settings it does not show)."""
    settings = _settings(session)
    if settings is None:
        return session
    with _lock:
        found = _transports.get(session)
        if found is None:
            found = _transports[session] = Transport(**settings)
        return found


def _settings(session: Any) -> dict[str, Any] | None:
    if type(session) is not URLLib3Session:
        return None
    needed = ("_verify", "_timeout", "_max_pool_connections", "_socket_options", "_proxy_config")
    if not all(hasattr(session, name) for name in needed):
        return None
    if getattr(session, "_cert_file", None) or _proxied(session):
        return None
    timeout = session._timeout
    if isinstance(timeout, int | float):
        connect: Any = float(timeout)
        read: Any = connect
    else:
        connect = getattr(timeout, "connect_timeout", None)
        read = getattr(timeout, "read_timeout", None)
        if not isinstance(connect, int | float) or not isinstance(read, int | float):
            return None
    return {
        "connect_timeout": connect,
        "read_timeout": read,
        "pool_size": int(session._max_pool_connections),
        "verify": session._verify,
        "socket_options": list(session._socket_options or []),
    }


def _proxied(session: Any) -> bool:
    config = session._proxy_config
    configured = getattr(config, "_proxies", None) or {}
    environment = {k: v for k, v in urllib.request.getproxies().items() if k in ("http", "https")}
    return bool(configured) or bool(environment)


def _after_fork() -> None:
    for transport in list(_transports.values()):
        transport.forget()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
