"""The rate limits across a pool of real processes on SeaweedFS: two ``s3queue dev`` (one
leads, the other follows and works) and one ``s3queue worker``.

Each handler appends ``<pid> <start time, ms> <partition>`` to a log, by its own clock, the
moment it starts: the limits are judged by those times, bucketed by second (the windows of
`protocol.budgets`), never by how long the run took. The processes run with ``--drain``
and the test joins them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from s3queue.local.seaweed import EmbeddedS3
from s3queue.producing.producer import Queue
from s3queue.storage.s3 import S3Storage

pytestmark = pytest.mark.s3

LIMIT = 6
PER_PARTITION = 4
"""Two partitions at 4 a second each could start 8 a second together: both limits bind."""
MESSAGES = 48
HANDLER = f"""
import os, time

SETTINGS = {{
    "rate_limit": {LIMIT},
    "partition_rate_limit": {PER_PARTITION},
    "batch_size": 1,
    "visibility_timeout": 6,
}}


def handle(message):
    with open(os.environ["RATE_LOG"], "a") as out:
        out.write(f"{{os.getpid()}} {{time.time_ns() // 1_000_000}} {{message.partition}}\\n")
    time.sleep(0.3)  # one worker thread a process: no process can start 6 a second alone
"""


def test_the_rate_limits_hold_across_two_dev_processes_and_a_worker(
    seaweed: EmbeddedS3, bucket: str, tmp_path: Path
) -> None:
    # GIVEN a rate-limited queue with a backlog of 48 messages in two partitions
    (tmp_path / "handlers").mkdir()
    (tmp_path / "handlers" / "limited.py").write_text(HANDLER)
    log = tmp_path / "starts.log"
    env = {
        **os.environ,
        "RATE_LOG": str(log),
        "AWS_ACCESS_KEY_ID": "s3queue",
        "AWS_SECRET_ACCESS_KEY": "s3queue-secret",
    }
    queue = Queue("limited", storage=S3Storage(seaweed.make_client(), bucket))
    for i in range(MESSAGES):  # one object each: tickets of one message, for every process
        queue.enqueue({"n": i}, partition=f"p{i % 2}")
    # WHEN two `s3queue dev` and one `s3queue worker` drain it together
    base = [sys.executable, "-m", "s3queue.local.cli", "--endpoint-url", seaweed.endpoint_url]
    base += ["--bucket", bucket]
    handlers = str(tmp_path / "handlers")
    procs = []
    for i, command in enumerate(("dev", "dev", "worker")):
        with (tmp_path / f"{command}-{i}.log").open("w") as out:  # files: no pipe fills up
            args = [*base, command, "--drain", "--workers", "1", "--handlers", handlers]
            procs.append(subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT))
    for proc in procs:
        assert proc.wait(timeout=240) == 0, list(tmp_path.glob("*.log"))
    # THEN every message started once, more than one process started them, and no second saw
    # more than the limit of starts, nor of one partition's
    starts = [line.split() for line in log.read_text().splitlines()]
    assert len(starts) == MESSAGES
    per_second = Counter(int(at) // 1000 for _, at, _ in starts)
    assert max(per_second.values()) <= LIMIT, sorted(per_second.items())
    per_partition = Counter((p, int(at) // 1000) for _, at, p in starts)
    assert max(per_partition.values()) <= PER_PARTITION, sorted(per_partition.items())
    assert len({pid for pid, _, _ in starts}) >= 2, "the work was not shared"
