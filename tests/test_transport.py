"""The lean path's HTTP exchange (`s3queue.storage.transport`) against a scripted server on
loopback: kept-alive connections, every way an answer may be framed, botocore's error for
each way an exchange fails, TLS checked, a forked child's own connections, and botocore's
session kept where the transport would differ from it.

Its use by `S3Storage` against SeaweedFS is the rest of the suite's (`test_lean_path.py`,
`test_s3_storage.py`, `test_storage_contract.py`: their clients are `make_client`'s)."""

from __future__ import annotations

import datetime
import ipaddress
import os
import select
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from botocore.awsrequest import AWSPreparedRequest
from botocore.exceptions import (
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
    SSLError,
)
from botocore.httpsession import URLLib3Session
from s3queue.storage import wire
from s3queue.storage.hedging import Hedging
from s3queue.storage.transport import Transport, transport_of


class Closing(bytes):
    """An answer after which the server closes the connection."""


Reply = Callable[[bytes], bytes | None]
"""What the server answers to one request's head (None: close without a word; `Closing`:
close once it is sent)."""


def ok(body: bytes = b"hello", extra: str = "") -> bytes:
    head = f'HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\nETag: "e1"\r\n{extra}\r\n'
    return head.encode() + body


@dataclass
class Server:
    """A loopback HTTP server answering each request with the next of `replies`."""

    replies: list[Reply] = field(default_factory=list)
    context: ssl.SSLContext | None = None
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)
    sock: socket.socket = field(default_factory=socket.socket)

    def __post_init__(self) -> None:
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        scheme = "https" if self.context else "http"
        return f"{scheme}://127.0.0.1:{self.sock.getsockname()[1]}"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            if self.context is not None:
                conn = self.context.wrap_socket(conn, server_side=True)
            reader = conn.makefile("rb")
            while True:
                head = b""
                while not head.endswith(b"\r\n\r\n"):
                    line = reader.readline()
                    if not line:
                        return
                    head += line
                length = [h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")]
                body = reader.read(int(length[0].split(b":")[1])) if length else b""
                self.requests.append(head + body)
                answer = self.replies.pop(0)(head) if self.replies else ok()
                if answer is None:
                    return
                conn.sendall(answer)
                if isinstance(answer, Closing):
                    return
        except (OSError, ssl.SSLError):
            return
        finally:
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def server() -> Iterator[Server]:
    found = Server()
    yield found
    found.close()


def transport(**settings: Any) -> Transport:
    given: dict[str, Any] = {
        "connect_timeout": 2.0,
        "read_timeout": 2.0,
        "pool_size": 4,
        "verify": True,
    }
    return Transport(**{**given, **settings})


def request(url: str, method: str = "GET", body: bytes | None = None) -> AWSPreparedRequest:
    headers = {"X-Amz-Date": "20261206T000000Z"}
    if body:
        headers["Content-Length"] = str(len(body))
    return AWSPreparedRequest(method, url + "/bkt/a%20key?x=1", headers, body, False)


def test_requests_share_one_kept_connection_and_carry_host_headers_and_body(
    server: Server,
) -> None:
    # GIVEN a transport
    sender = transport()
    # WHEN it sends a GET, then a PUT with a body
    first = sender.send(request(server.url))
    second = sender.send(request(server.url, "PUT", b'{"n": 1}'))
    # THEN both answers are read whole, over one connection
    assert (first.status_code, first.content, first.headers.get("ETag")) == (200, b"hello", '"e1"')
    assert second.content == b"hello"
    assert server.connections == 1
    # AND each request went out as sent: its target, Host (with the port), headers, body
    port = server.url.rsplit(":", 1)[1]
    assert server.requests[0].startswith(b"GET /bkt/a%20key?x=1 HTTP/1.1\r\n")
    assert f"Host: 127.0.0.1:{port}\r\n".encode() in server.requests[0]
    assert b"X-Amz-Date: 20261206T000000Z\r\n" in server.requests[1]
    assert server.requests[1].endswith(b'\r\n\r\n{"n": 1}')


@pytest.mark.parametrize(
    ("answer", "method", "content"),
    [
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"5\r\nhello\r\n6;x=y\r\n world\r\n0\r\nT: 1\r\n\r\n",
            "GET",
            b"hello world",
        ),
        (b'HTTP/1.1 200 OK\r\nContent-Length: 9\r\nETag: "e"\r\n\r\n', "HEAD", b""),
        (b"HTTP/1.1 204 No Content\r\n\r\n", "DELETE", b""),
        (
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
            "PUT",
            b"ok",
        ),
        (b"HTTP/1.1 404 Not Found\r\nContent-Length: 7\r\n\r\nmissing", "GET", b"missing"),
    ],
)
def test_every_framing_of_an_answer_is_read_and_the_connection_kept(
    server: Server, answer: bytes, method: str, content: bytes
) -> None:
    # GIVEN a server answering once as given, then as usual
    server.replies = [lambda _: answer]
    sender = transport()
    # WHEN two requests go out
    got = sender.send(request(server.url, method))
    after = sender.send(request(server.url))
    # THEN the first answer is read to its end, and the second on the same connection
    assert got.content == content
    assert after.content == b"hello"
    assert server.connections == 1


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
    ],
)
def test_an_answer_that_ends_its_connection_is_not_kept(server: Server, answer: bytes) -> None:
    server.replies = [lambda _: answer]
    sender = transport()
    assert sender.send(request(server.url)).content == b"ok"
    assert sender.send(request(server.url)).content == b"hello"
    assert server.connections == 2


def test_a_body_without_a_length_is_read_to_the_connections_end(server: Server) -> None:
    # GIVEN an answer with neither a length nor chunks: the server's close ends it
    server.replies = [lambda _: Closing(b"HTTP/1.1 200 OK\r\n\r\nall of it")]
    sender = transport()
    # THEN its body is all that was sent, and the next request opens a new connection
    assert sender.send(request(server.url)).content == b"all of it"
    assert sender.send(request(server.url)).content == b"hello"
    assert server.connections == 2


def test_a_connection_the_server_closed_while_idle_is_not_reused(server: Server) -> None:
    # GIVEN a kept connection, which the server closes once it has answered (an idle timeout)
    server.replies = [lambda _: Closing(ok())]
    sender = transport()
    assert sender.send(request(server.url)).content == b"hello"
    (kept,) = [conn for idle in sender._idle.values() for conn in idle]
    readable, _, _ = select.select([kept.sock], [], [], 10)  # its close has arrived: no sleep
    assert readable
    # WHEN the next request goes out
    answer = sender.send(request(server.url))
    # THEN it went on a new connection, and nothing failed
    assert answer.content == b"hello"
    assert server.connections == 2


CUT_BODY = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\ncut"
CUT_CHUNK = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n9\r\nab"


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (lambda _: None, ConnectionClosedError),
        (
            lambda _: Closing(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\ncut"),
            ConnectionClosedError,
        ),
        (lambda _: b"SSH-2.0-OpenSSH\r\n", ConnectionClosedError),
        (
            lambda _: Closing(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n9\r\nab"),
            ConnectionClosedError,
        ),
    ],
)
def test_a_broken_exchange_raises_botocores_error_and_drops_the_connection(
    server: Server, reply: Reply, error: type[Exception]
) -> None:
    server.replies = [reply]
    sender = transport()
    with pytest.raises(error):
        sender.send(request(server.url))
    assert sender.send(request(server.url)).content == b"hello"
    assert server.connections == 2


def test_a_server_that_never_answers_is_a_read_timeout() -> None:
    # GIVEN a socket that accepts (the kernel's backlog) and never answers
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)
    try:
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with pytest.raises(ReadTimeoutError):
            transport(read_timeout=0.2).send(request(url))
    finally:
        silent.close()


def test_nobody_listening_is_an_endpoint_connection_error() -> None:
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    with pytest.raises(EndpointConnectionError):
        transport().send(request(f"http://127.0.0.1:{port}"))


def test_a_connect_that_does_not_complete_is_a_connect_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # (an unanswered SYN, without leaving this machine: the connect times out)
    def unanswered(address: tuple[str, int], timeout: float | None = None) -> socket.socket:
        raise TimeoutError("timed out")

    monkeypatch.setattr(socket, "create_connection", unanswered)
    with pytest.raises(ConnectTimeoutError):
        transport(connect_timeout=0.05).send(request("http://127.0.0.1:9"))


def test_at_most_pool_size_connections_are_kept_idle(server: Server) -> None:
    # GIVEN a transport keeping at most 2, and 5 requests in flight at once
    sender = transport(pool_size=2)
    barrier = threading.Barrier(5)
    server.replies = [_after(barrier) for _ in range(5)]
    threads = [threading.Thread(target=sender.send, args=(request(server.url),)) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # THEN five connections were opened and two are kept
    assert server.connections == 5
    assert sum(len(idle) for idle in sender._idle.values()) == 2


def _after(barrier: threading.Barrier) -> Reply:
    def reply(_: bytes) -> bytes:
        barrier.wait(timeout=10)  # every request is in flight before any is answered
        return ok()

    return reply


def test_a_forked_child_opens_its_own_connection(server: Server) -> None:
    # GIVEN a transport with a kept connection
    sender = transport()
    sender.send(request(server.url))
    assert server.connections == 1
    # WHEN a forked child sends on it
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        try:
            answer = sender.send(request(server.url))
            os.write(write, answer.content)
        finally:
            os._exit(0)
    os.close(write)
    got = os.read(read, 100)
    os.waitpid(pid, 0)
    os.close(read)
    # THEN the child was answered on a connection of its own, and the parent's still serves
    assert got == b"hello"
    assert server.connections == 2
    assert sender.send(request(server.url)).content == b"hello"
    assert server.connections == 2


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    folder = tmp_path_factory.mktemp("tls")
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@pytest.fixture
def tls_server(certificate: tuple[Path, Path]) -> Iterator[Server]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*certificate)
    found = Server(context=context)
    yield found
    found.close()


def test_tls_is_checked_against_the_given_certificates(
    tls_server: Server, certificate: tuple[Path, Path]
) -> None:
    # GIVEN a TLS server whose certificate is its own (not in the system's store)
    url = tls_server.url
    # THEN a transport trusting that certificate is answered, twice on one connection
    trusting = transport(verify=str(certificate[0]))
    assert trusting.send(request(url)).content == b"hello"
    assert trusting.send(request(url)).content == b"hello"
    assert tls_server.connections == 1
    # AND the default check refuses it, as botocore's session does
    with pytest.raises(SSLError):
        transport(verify=True).send(request(url))
    # AND verify=False (botocore's ``verify=False``) does not check it
    assert transport(verify=False).send(request(url)).content == b"hello"


def test_botocores_session_is_kept_behind_a_proxy_or_with_a_client_certificate(
    monkeypatch: pytest.MonkeyPatch, certificate: tuple[Path, Path]
) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    plain = URLLib3Session(timeout=7, max_pool_connections=3)
    made = transport_of(plain)
    assert isinstance(made, Transport)
    assert (made.connect_timeout, made.read_timeout, made.pool_size) == (7.0, 7.0, 3)
    assert transport_of(plain) is made  # one per session
    configured = URLLib3Session(proxies={"https": "http://proxy.invalid:3128"})
    assert transport_of(configured) is configured
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    assert transport_of(URLLib3Session()) is not None
    assert isinstance(transport_of(URLLib3Session()), URLLib3Session)
    monkeypatch.delenv("HTTPS_PROXY")
    with_cert = URLLib3Session(client_cert=str(certificate[0]))
    assert transport_of(with_cert) is with_cert


def test_a_large_body_goes_out_whole(server: Server) -> None:
    body = bytes(range(256)) * 800  # 200 KiB: sent apart from its head
    assert transport().send(request(server.url, "PUT", body)).content == b"hello"
    assert server.requests[0].endswith(b"\r\n\r\n" + body)


class Fixed(Hedging):
    """Races every read after `after` ms (the policy itself: test_hedging.py)."""

    def __init__(self, after: float) -> None:
        super().__init__()
        self.after = after

    def after_ms(self, operation: str) -> float | None:
        return self.after if operation in ("GetObject", "HeadObject") else None


@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_a_slow_read_is_raced_and_the_loser_s_connection_kept(server: Server, method: str) -> None:
    # GIVEN a first answer held back until the test lets it go, a second one at once
    let_go = threading.Event()

    def held(_: bytes) -> bytes:
        let_go.wait(timeout=10)
        return ok(b"first") if method == "GET" else ok(b"").replace(b"0", b"5", 1)

    server.replies = [held, lambda _: ok(b"second")]
    sender = transport(hedging=Fixed(20))
    # WHEN a read is sent
    answer = sender.send(request(server.url, method), "GetObject")
    # THEN the second copy's answer is the one used
    assert answer.content == (b"second" if method == "GET" else b"")
    assert sender.raced == 1 and server.connections == 2
    # AND once the first answer arrives, it is read and dropped, its connection kept
    let_go.set()
    (loser, _, _) = sender._draining[0]
    assert loser.ready(10)
    assert sender.send(request(server.url)).content == b"hello"
    assert sender.send(request(server.url)).content == b"hello"
    assert server.connections == 2 and not sender._draining
    assert len(server.requests) == 4


def test_a_read_that_answers_in_time_and_a_write_are_never_raced(server: Server) -> None:
    sender = transport(hedging=Fixed(5_000))
    assert sender.send(request(server.url), "GetObject").content == b"hello"
    assert sender.send(request(server.url, "PUT", b"x"), "PutObject").content == b"hello"
    assert sender.raced == 0 and server.connections == 1


def _noting_503(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """An event set once the client has read a 503 (so a test's server can wait for it)."""
    read_503 = threading.Event()
    receive = wire.Connection.receive

    def noting(self: wire.Connection, head: bool, url: str) -> Any:
        answer = receive(self, head, url)
        if answer[0].status_code == 503:
            read_503.set()
        return answer

    monkeypatch.setattr(wire.Connection, "receive", noting)
    return read_503


def test_a_raced_copy_that_fails_fast_gives_way_to_the_slow_answer(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a first answer held back until the client has read the second copy's 503
    read_503 = _noting_503(monkeypatch)

    def held(_: bytes) -> bytes:
        read_503.wait(timeout=10)
        return ok(b"slow but sure")

    slowdown = b"HTTP/1.1 503 Slow Down\r\nContent-Length: 0\r\n\r\n"
    server.replies = [held, lambda _: slowdown]
    sender = transport(hedging=Fixed(20))
    # WHEN a read is raced and the race's copy is refused at once
    answer = sender.send(request(server.url), "GetObject")
    # THEN the first copy's answer is used
    assert (answer.status_code, answer.content) == (200, b"slow but sure")
    assert sender.raced == 1 and read_503.is_set()


def test_a_connection_past_file_number_1023_is_kept(server: Server) -> None:
    # GIVEN a process with more than 1,024 files open (select() refuses their numbers)
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1_200:
        pytest.skip(f"this machine allows {hard} open files")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1_200), hard))
    held = [os.dup(0) for _ in range(1_100)]
    try:
        sender = transport(hedging=Fixed(5_000))
        # WHEN two reads go out
        assert sender.send(request(server.url), "GetObject").content == b"hello"
        (kept,) = [conn for idle in sender._idle.values() for conn in idle]
        assert kept.sock.fileno() > 1_024
        assert sender.send(request(server.url), "GetObject").content == b"hello"
        # THEN the second went on the first's connection
        assert server.connections == 1
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_raced_503_is_the_answer_when_the_slow_copy_then_breaks(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a first copy whose connection closes, unanswered, once the client has read the
    # second copy's 503
    read_503 = _noting_503(monkeypatch)

    def broken(_: bytes) -> None:
        read_503.wait(timeout=10)

    server.replies = [broken, lambda _: b"HTTP/1.1 503 Slow Down\r\nContent-Length: 0\r\n\r\n"]
    sender = transport(hedging=Fixed(20))
    # THEN the 503 is given to the caller (its retries decide), not the broken copy's error
    assert sender.send(request(server.url), "GetObject").status_code == 503
