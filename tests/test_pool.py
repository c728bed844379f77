"""A distributed worker pool: several runtime processes on one queue, on SeaweedFS.

Real processes (``python -m s3queue.local.cli``), as a user runs them: each one's handler
appends ``<pid> <message id>`` to a log, so the test sees who ran what. Nothing here waits on
the wall clock: the processes run with ``--drain`` and the test joins them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from s3queue.local.seaweed import EmbeddedS3
from s3queue.producing.producer import Queue
from s3queue.storage.s3 import S3Storage

pytestmark = pytest.mark.s3

HANDLER = """
import os, time

SETTINGS = {"batch_size": 2, "max_in_flight_tickets": 64, "visibility_timeout": 6}


def handle(message):
    time.sleep(0.05)  # an I/O-bound handler
    with open(os.environ["POOL_LOG"], "a") as out:
        out.write(f"{os.getpid()} {message.id}\\n")
    kill_after = int(os.environ.get("POOL_KILL_AFTER", "0"))
    if kill_after and _mine() >= kill_after:
        os.kill(os.getpid(), 9)  # SIGKILL: the process dies mid-work, its leases held


def _mine():
    with open(os.environ["POOL_LOG"]) as log:
        return sum(1 for line in log if line.split()[0] == str(os.getpid()))
"""


@pytest.fixture
def pool_env(seaweed: EmbeddedS3, bucket: str, tmp_path: Path) -> Iterator[dict[str, str]]:
    (tmp_path / "handlers").mkdir()
    (tmp_path / "handlers" / "jobs.py").write_text(HANDLER)
    env = {
        **os.environ,
        "POOL_LOG": str(tmp_path / "ran.log"),
        "AWS_ACCESS_KEY_ID": "s3queue",
        "AWS_SECRET_ACCESS_KEY": "s3queue-secret",
    }
    yield env


def runtime(
    seaweed: EmbeddedS3, bucket: str, tmp_path: Path, env: dict[str, str], *args: str
) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "s3queue.local.cli", "--endpoint-url", seaweed.endpoint_url]
    command += ["--bucket", bucket, *args, "--handlers", str(tmp_path / "handlers")]
    return subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def enqueue(queue: Queue, count: int) -> list[str]:
    with ThreadPoolExecutor(8) as threads:
        return list(threads.map(lambda i: queue.enqueue({"n": i}), range(count)))


def ran(tmp_path: Path) -> list[tuple[int, str]]:
    lines = (tmp_path / "ran.log").read_text().split()
    return [(int(pid), mid) for pid, mid in zip(lines[::2], lines[1::2], strict=True)]


def test_every_process_of_the_pool_runs_handlers(
    seaweed: EmbeddedS3, bucket: str, tmp_path: Path, pool_env: dict[str, str]
) -> None:
    # GIVEN 400 messages of 50 ms each, and three runtimes started together: one `dev`
    # (it will lead), two `worker`s (they never dispatch)
    queue = Queue("jobs", storage=S3Storage(seaweed.make_client(), bucket))
    ids = enqueue(queue, 400)
    procs = [runtime(seaweed, bucket, tmp_path, pool_env, "dev", "--drain")]
    procs += [runtime(seaweed, bucket, tmp_path, pool_env, "worker", "--drain") for _ in range(2)]
    # WHEN they drain the queue
    for proc in procs:
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-2000:]
    # THEN every message ran exactly once, and every process ran some of them
    runs = ran(tmp_path)
    assert sorted(mid for _, mid in runs) == sorted(ids)
    by_process = Counter(pid for pid, _ in runs)
    assert set(by_process) == {p.pid for p in procs}, by_process


def test_a_killed_leader_is_replaced_and_its_work_redelivered(
    seaweed: EmbeddedS3, bucket: str, tmp_path: Path, pool_env: dict[str, str]
) -> None:
    # GIVEN a leader that dispatched and claimed work, then is killed (SIGKILL) mid-work: its
    # handler kills its own process after its 20th message
    storage = S3Storage(seaweed.make_client(), bucket)
    queue = Queue("jobs", storage=storage)
    ids = enqueue(queue, 200)
    leader = runtime(
        seaweed, bucket, tmp_path, {**pool_env, "POOL_KILL_AFTER": "20"}, "dev", "--drain"
    )
    leader.communicate(timeout=240)
    assert leader.returncode == -signal.SIGKILL
    lease = json.loads(storage.get(queue.keys.lease).body)  # type: ignore[union-attr]
    assert lease["owner"].split(":")[1] == str(leader.pid)
    # WHEN another runtime starts on the queue
    other = runtime(seaweed, bucket, tmp_path, pool_env, "dev", "--drain")
    _, err = other.communicate(timeout=240)
    assert other.returncode == 0, err[-2000:]
    # THEN it took over the lease (a new epoch) and every message ran, the killed leader's
    # unfinished ones again
    after = json.loads(storage.get(queue.keys.lease).body)  # type: ignore[union-attr]
    assert after["epoch"] > lease["epoch"]
    runs = ran(tmp_path)
    assert {mid for _, mid in runs} == set(ids)
    assert {pid for pid, _ in runs} == {leader.pid, other.pid}
