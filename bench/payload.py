"""Payloads of any size: one file enqueued with `Queue.enqueue_file` and read to its end by a
handler through ``message.open()``, each side in a process of its own, with its peak RSS growth.

- **producer**: ``enqueue_file(path)`` (a managed multipart upload into ``blobs/``, then the
  message record);
- **worker**: the local runtime (`run_local`, one worker thread) drains the queue; the handler
  reads the stream in 1 MiB pieces to its end and hashes them, then checks the digest and size.

RSS growth is the process's peak (``VmHWM``) at the end minus its resident size (``VmRSS``)
once its imports and client are ready, just before the measured call: what the payload cost
that process, not Python's own footprint. The file is written beforehand (repeated random
MiB blocks, so its writing costs nothing measured).

Run on its own, with any size::

    python -m bench.run --only payload --payload-bytes 2147483648
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.plan import Plan
from bench.progress import Progress
from bench.target import Target

ROOT = Path(__file__).resolve().parents[1]
MiB = 1024 * 1024
QUEUE = "payload"


def run(target: Target, plan: Plan, progress: Progress) -> dict[str, Any]:
    space = target.space("payload")
    size = plan.payload_bytes
    with tempfile.TemporaryDirectory(prefix="s3queue-payload-") as tmp:
        path = Path(tmp) / "payload.bin"
        progress.update(0.0, f"writing a {size / MiB:,.0f} MiB file")
        digest = write_file(path, size)
        common = ["--endpoint-url", target.endpoint_url, "--bucket", space.bucket]
        common += ["--prefix", space.prefix]
        progress.update(0.1, "producer: enqueue_file")
        producer = _child(["produce", *common, "--file", str(path)], target)
        progress.update(0.5, "worker: read it to the end")
        worker = _child(["work", *common, "--sha256", digest, "--size", str(size)], target)
    rate = size / MiB
    return {
        "params": {"payload_bytes": size},
        "producer": {**producer, "mib_per_s": round(rate / producer["seconds"], 1)},
        "worker": {**worker, "mib_per_s": round(rate / worker["seconds"], 1)},
    }


def write_file(path: Path, size: int) -> str:
    """`size` bytes of repeated random 1 MiB blocks; their SHA-256."""
    block, digest = os.urandom(MiB), hashlib.sha256()
    with path.open("wb") as out:
        left = size
        while left:
            piece = block[: min(left, MiB)]
            out.write(piece)
            digest.update(piece)
            left -= len(piece)
    return digest.hexdigest()


def _child(args: list[str], target: Target) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if target.embedded:
        env.update(AWS_ACCESS_KEY_ID="s3queue", AWS_SECRET_ACCESS_KEY="s3queue-secret")
    done = subprocess.run(
        [sys.executable, "-m", "bench.payload", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=3600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"bench.payload {args[0]} failed: {done.stderr.strip()[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def memory_kib() -> dict[str, int]:
    """VmRSS and VmHWM of this process, in KiB (Linux)."""
    fields: dict[str, int] = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0])
    return fields


def _measured(call: Any) -> dict[str, Any]:
    """Run `call`; its seconds and this process's RSS growth over it, in MiB."""
    before = memory_kib()["VmRSS"]
    started = time.perf_counter()
    call()
    seconds = time.perf_counter() - started
    peak = memory_kib()["VmHWM"]
    return {
        "seconds": round(seconds, 2),
        "rss_before_mib": round(before / 1024, 1),
        "rss_peak_mib": round(peak / 1024, 1),
        "rss_growth_mib": round((peak - before) / 1024, 1),
    }


def _produce(args: argparse.Namespace) -> dict[str, Any]:
    from s3queue.producing.producer import Queue  # noqa: PLC0415 - imported in the child only
    from s3queue.storage.clients import make_client  # noqa: PLC0415

    queue = Queue(QUEUE, bucket=args.bucket, s3=make_client(args.endpoint_url), prefix=args.prefix)
    ids: list[str] = []
    result = _measured(lambda: ids.append(queue.enqueue_file(Path(args.file))))
    return {**result, "message_id": ids[0]}


def _work(args: argparse.Namespace) -> dict[str, Any]:
    from s3queue.local.runtime import run_local  # noqa: PLC0415 - imported in the child only
    from s3queue.message import Message  # noqa: PLC0415
    from s3queue.storage.clients import make_client  # noqa: PLC0415

    client = make_client(args.endpoint_url)
    seen: list[tuple[str, int, int]] = []

    def handle(message: Message) -> None:
        digest, read = hashlib.sha256(), 0
        with message.open() as stream:
            while piece := stream.read(MiB):
                digest.update(piece)
                read += len(piece)
        seen.append((digest.hexdigest(), read, message.size))

    settings = {"timeout": 3600, "visibility_timeout": 600, "max_retries": 0}

    def drain() -> None:
        run_local(
            {QUEUE: handle},
            bucket=args.bucket,
            s3=client,
            prefix=args.prefix,
            workers=1,
            drain=True,
            overrides=settings,
            timeout=3600,
        )

    result = _measured(drain)
    if seen != [(args.sha256, args.size, args.size)]:
        raise SystemExit(f"the handler read {seen}, not {args.size} bytes of {args.sha256}")
    return {**result, "bytes_read": args.size}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.payload")
    parser.add_argument("role", choices=["produce", "work"])
    parser.add_argument("--endpoint-url", required=True)
    parser.add_argument("--bucket", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--file")
    parser.add_argument("--sha256")
    parser.add_argument("--size", type=int)
    args = parser.parse_args(argv)
    result = _produce(args) if args.role == "produce" else _work(args)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
