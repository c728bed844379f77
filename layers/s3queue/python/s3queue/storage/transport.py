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
import urllib.request
import weakref
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import urlsplit

from botocore.exceptions import (
    BotoCoreError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    HTTPClientError,
    SSLError,
)
from botocore.httpsession import URLLib3Session, get_cert_path

from s3queue.storage.wire import Answer, Broken, Connection, Short


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

    def send(self, request: Any) -> Answer:
        """Send a prepared request (``method``, ``url``, ``headers``, ``body``): its answer,
        its body read in full; botocore's error for each way it can fail."""
        url: str = request.url
        origin, target = self._split(url)
        head = [f"{request.method} {target} HTTP/1.1", f"Host: {origin.host}"]
        head += [f"{name}: {value}" for name, value in request.headers.items()]
        body = request.body or b""
        if isinstance(body, str):
            body = body.encode()
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")
        conn = self._take(origin, url)
        try:
            answer, keep = conn.exchange(data, bytes(body), request.method == "HEAD", url)
        except Broken as exc:
            # Also a kept connection the server closed just as we sent: botocore's session
            # gives that error to its caller too (urllib3 does not retry it for it).
            conn.close()
            raise _translate(exc.__cause__, url) from exc.__cause__
        except BaseException:
            conn.close()
            raise
        if keep:
            self._give(origin, conn)
        else:
            conn.close()
        return answer

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
            self._idle, self._pid = {}, os.getpid()

    def _split(self, url: str) -> tuple[Origin, str]:
        """`url`'s origin (kept per scheme, host and port) and its request target."""
        slash = url.find("/", url.index("://") + 3)
        base, target = (url, "/") if slash < 0 else (url[:slash], url[slash:])
        origin = self._origins.get(base)
        if origin is None:
            origin = self._origins[base] = Origin.of(base)
        return origin, target

    def _take(self, origin: Origin, url: str) -> Connection:
        with self._lock:
            if self._pid != os.getpid():
                self._idle, self._pid = {}, os.getpid()
            idle = self._idle.get(origin.base)
            while idle:
                conn = idle.pop()
                if conn.alive():
                    return conn
                conn.close()
        return self._connect(origin, url)

    def _give(self, origin: Origin, conn: Connection) -> None:
        with self._lock:
            idle = self._idle.setdefault(origin.base, [])
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
        return Connection(sock)

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
