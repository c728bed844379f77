"""`DelayProxy`: AWS-like round trips between the code under measurement and the local S3.

An HTTP/1.1 proxy in a process of its own: each request waits, on its way to the server, as
long as one round trip to S3 takes (by default 30 ms a PUT, POST or DELETE, 20 ms a GET or
HEAD, 50 ms a LIST: `AWS_LIKE`), then goes on over a keep-alive connection of its own, one
per client connection. The wait is an ``asyncio.sleep`` in another process: it holds neither
the client's CPU nor a lock of its interpreter, as the network does. (A botocore hook that
slept in the sending thread would model it only as far as the client's threads overlap, and it
would hide the cost of the threads a real wait needs; a proxy models the network without that
argument.) The proxy's own CPU is small, yet it shares the machine: a run to compare against
goes through the same proxy with no delay (`NO_DELAY`), so the only difference is the wait.

    client --(keep-alive)--> proxy: sleep(delay of the request) --(keep-alive)--> SeaweedFS

Requests are forwarded byte for byte (the signature covers the host the client addressed,
which is the proxy's, and that is what the server receives). ``Expect: 100-continue`` is
answered by the proxy itself and left out upstream (SigV4 does not sign it).

    python -m bench.delay --upstream http://127.0.0.1:8333 --put 0.03 --get 0.02 --list 0.05
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import subprocess
import sys
import urllib.parse
from dataclasses import dataclass
from types import TracebackType

from bench.cpuuse import cpu_of

HEAD_LIMIT = 64 * 1024
CONTROL = "/__delay__"
"""The proxy's own path (no bucket can be named so): request counts, and their reset."""


def kind_of(method: str, target: str) -> str:
    """The billing kind of a request: PUT, GET, HEAD, LIST, DELETE, POST (or OTHER)."""
    if method == "GET":
        path, _, query = target.partition("?")
        if path.strip("/").count("/") == 0 and "list-type" in query:
            return "LIST"
    return method if method in ("PUT", "GET", "HEAD", "DELETE", "POST") else "OTHER"


@dataclass(frozen=True)
class Delays:
    """Seconds a request of each kind waits on its way to S3 (one round trip)."""

    put: float = 0.0
    """PUT, POST (DeleteObjects) and DELETE: the writes."""
    get: float = 0.0
    """GET and HEAD of an object."""
    list: float = 0.0
    """GET of a bucket (ListObjectsV2)."""

    def of(self, method: str, target: str) -> float:
        """The delay of one request, by its method and request target."""
        kind = kind_of(method, target)
        return self.list if kind == "LIST" else self.get if kind in ("GET", "HEAD") else self.put

    def describe(self) -> str:
        return (
            f"PUT {self.put * 1000:g} ms, GET {self.get * 1000:g} ms, LIST {self.list * 1000:g} ms"
        )


AWS_LIKE = Delays(put=0.030, get=0.020, list=0.050)
"""The round trips issue 22 asks for: "in the tens of milliseconds" for small requests within
a region (AWS's S3 performance guidelines, `../shared/AWS-FACTS.md`), a LIST slower."""
NO_DELAY = Delays()


async def _read_head(reader: asyncio.StreamReader) -> bytes | None:
    """One request or response head (through the blank line), or None at a clean EOF."""
    try:
        return await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise ConnectionError("connection closed inside a message head") from exc
        return None


def _headers(head: bytes) -> tuple[str, list[tuple[str, str]]]:
    lines = head.decode("latin-1").split("\r\n")
    fields = [tuple(p.strip() for p in line.split(":", 1)) for line in lines[1:] if ":" in line]
    return lines[0], [(k, v) for k, v in fields]


def _find(fields: list[tuple[str, str]], name: str) -> str | None:
    return next((v for k, v in fields if k.lower() == name), None)


async def _relay_body(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    fields: list[tuple[str, str]],
    *,
    request: bool = False,
) -> bool:
    """Copy the body the head announced; False if it runs to the end of the connection (a
    response without a length; a request without one has no body)."""
    length = _find(fields, "content-length")
    if length is not None:
        remaining = int(length)
        while remaining:
            chunk = await reader.read(min(remaining, 1 << 16))
            if not chunk:
                raise ConnectionError("connection closed inside a body")
            writer.write(chunk)
            remaining -= len(chunk)
        return True
    if "chunked" in (_find(fields, "transfer-encoding") or "").lower():
        while True:
            size_line = await reader.readuntil(b"\r\n")
            writer.write(size_line)
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
                    writer.write(line)  # trailers
                writer.write(b"\r\n")
                return True
            writer.write(await reader.readexactly(size + 2))
    if request:
        return True
    while chunk := await reader.read(1 << 16):
        writer.write(chunk)
    return False


class _Connection:
    """One client connection and its own upstream connection, request after request."""

    def __init__(self, upstream: tuple[str, int], delays: Delays, counts: dict[str, int]) -> None:
        self.upstream, self.delays, self.counts = upstream, delays, counts
        self.up: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while (head := await _read_head(reader)) is not None:
                if not await self._one(head, reader, writer):
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()
            if self.up is not None:
                self.up[1].close()

    async def _one(
        self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        start, fields = _headers(head)
        method, target = start.split(" ", 2)[:2]
        if target.startswith(CONTROL):
            return self._control(method, writer)
        kind = kind_of(method, target)
        self.counts[kind] = self.counts.get(kind, 0) + 1
        if (_find(fields, "expect") or "").lower() == "100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            kept = [line for line in head.split(b"\r\n") if not line.lower().startswith(b"expect:")]
            head = b"\r\n".join(kept)
        await asyncio.sleep(self.delays.of(method, target))  # the round trip, before the server
        up_reader, up_writer = await self._upstream()
        up_writer.write(head)
        await _relay_body(reader, up_writer, fields, request=True)
        await up_writer.drain()
        answer = await _read_head(up_reader)
        if answer is None:
            raise ConnectionError("the server closed the connection")
        status, answer_fields = _headers(answer)
        writer.write(answer)
        code = int(status.split(" ", 2)[1])
        whole = True
        if method != "HEAD" and code not in (204, 304) and code >= 200:
            whole = await _relay_body(up_reader, writer, answer_fields)
        await writer.drain()
        closing = (_find(answer_fields, "connection") or "").lower() == "close"
        if closing or not whole:
            up_writer.close()
            self.up = None
        return whole

    def _control(self, method: str, writer: asyncio.StreamWriter) -> bool:
        """``GET /__delay__``: the requests counted so far, by kind; ``DELETE``: reset them."""
        body = json.dumps(self.counts).encode()
        if method == "DELETE":
            self.counts.clear()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
        writer.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        return True

    async def _upstream(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.up is None or self.up[1].is_closing():
            self.up = await asyncio.open_connection(*self.upstream, limit=HEAD_LIMIT)
        return self.up


async def _main(upstream: str, delays: Delays, port: int) -> None:
    url = urllib.parse.urlsplit(upstream)
    target = (url.hostname or "127.0.0.1", url.port or 80)

    counts: dict[str, int] = {}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _Connection(target, delays, counts).serve(reader, writer)

    server = await asyncio.start_server(handle, "127.0.0.1", port, limit=HEAD_LIMIT)
    bound = server.sockets[0].getsockname()[1]
    print(f"http://127.0.0.1:{bound}", flush=True)
    async with server:
        await server.serve_forever()


class DelayProxy:
    """`python -m bench.delay` in a child process for as long as the ``with`` lasts."""

    def __init__(self, upstream: str, delays: Delays) -> None:
        self.upstream, self.delays = upstream, delays
        self.url = ""
        self._process: subprocess.Popen[str] | None = None

    def __enter__(self) -> DelayProxy:
        d = self.delays
        command = [sys.executable, "-m", "bench.delay", "--upstream", self.upstream]
        command += ["--put", str(d.put), "--get", str(d.get), "--list", str(d.list)]
        self._process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        assert self._process.stdout is not None
        self.url = self._process.stdout.readline().strip()
        if not self.url.startswith("http://"):
            self._process.kill()
            raise RuntimeError(f"the delaying proxy did not start: {self.url!r}")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._process is not None:
            self._process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(timeout=10)
            if self._process.poll() is None:
                self._process.kill()
                self._process.wait()
            self._process = None

    def counts(self, *, reset: bool = False) -> dict[str, int]:
        """The requests forwarded since the last reset, by kind (``reset``: then from 0)."""
        url = urllib.parse.urlsplit(self.url)
        conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=10)
        try:
            conn.request("DELETE" if reset else "GET", CONTROL)
            counts: dict[str, int] = json.loads(conn.getresponse().read())
        finally:
            conn.close()
        return counts

    def cpu_seconds(self) -> float:
        """CPU the proxy process has used so far (user + system, from /proc), 0 if unknown."""
        return cpu_of(None if self._process is None else self._process.pid)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.delay", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--upstream", required=True, help="the S3 server, http://host:port")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (0: any free)")
    parser.add_argument("--put", type=float, default=AWS_LIKE.put, help="seconds per write")
    parser.add_argument("--get", type=float, default=AWS_LIKE.get, help="seconds per GET/HEAD")
    parser.add_argument("--list", type=float, default=AWS_LIKE.list, help="seconds per LIST")
    args = parser.parse_args(argv)
    delays = Delays(put=args.put, get=args.get, list=args.list)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(args.upstream, delays, args.port))


if __name__ == "__main__":
    main()
