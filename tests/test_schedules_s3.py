"""SeaweedFS: two processes enqueue the same schedule's slots; each slot goes in once.

Each process is a coordinator of its own (its own `Schedules`, its own S3 client) stepping a
FakeClock that starts at the same instant through the same ten minutes of a per-minute
schedule, so both try every slot; S3's conditional writes on the ``ids/`` markers decide.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from s3queue.contract.schedule import slot_id
from s3queue.local.seaweed import EmbeddedS3
from s3queue.storage.base import iter_keys
from s3queue.storage.s3 import S3Storage

pytestmark = pytest.mark.s3

START_MS = 1_764_751_830_000  # 2025-12-03T08:50:30Z
STEPS = 40
PROCESS = """
import json, sys
from s3queue.common.clock import FakeClock
from s3queue.contract.settings import QueueSettings
from s3queue.dispatching.coordinator import Coordinator
from s3queue.dispatching.schedules import Schedules
from s3queue.storage.clients import make_client
from s3queue.storage.s3 import S3Storage

endpoint, bucket, start, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
clock = FakeClock(start)
storage = S3Storage(make_client(endpoint), bucket)
coordinator = Coordinator(
    storage, "ticks", invoker=lambda _: None, settings=QueueSettings(schedule="* * * * *"),
    clock=clock,
)
schedules, written = Schedules(clock), 0
for _ in range(steps):
    written += len(schedules.enqueue_due([coordinator]).enqueued)
    clock.advance(15)
print(json.dumps({"written": written}))
"""


def test_two_processes_enqueue_each_slot_once(seaweed: EmbeddedS3, bucket: str) -> None:
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "s3queue", "AWS_SECRET_ACCESS_KEY": "s3queue-secret"}
    args = [sys.executable, "-c", PROCESS, seaweed.endpoint_url, bucket, str(START_MS), str(STEPS)]
    procs = [subprocess.Popen(args, env=env, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [proc.communicate(timeout=120)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0]
    written = [json.loads(out.splitlines()[-1])["written"] for out in outputs]
    storage = S3Storage(seaweed.make_client(), bucket)
    markers = [e.key.rsplit("/", 1)[1] for e in iter_keys(storage, "s3queue/ticks/ids/")]
    messages = list(iter_keys(storage, "s3queue/ticks/msg/"))
    # THEN the eleven slots from 08:50 to 09:00 each have one marker and one message, and the
    # two processes together wrote each exactly once
    slots = [START_MS - 30_000 + minute * 60_000 for minute in range(11)]
    assert sorted(markers) == [slot_id(s) for s in slots]
    assert len(messages) == len(slots)
    assert sum(written) == len(slots), written
