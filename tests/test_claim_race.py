"""Race: many workers invoked with one ticket on a real S3 server; exactly one runs it."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from s3queue.dispatching.coordinator import Coordinator
from s3queue.message import Message
from s3queue.producing.producer import Queue
from s3queue.storage.s3 import S3Storage
from s3queue.working.worker import Worker

pytestmark = pytest.mark.s3

THREADS = 16
ROUNDS = 6


def race(storage: S3Storage, payload: dict[str, Any]) -> tuple[list[Message], list[str]]:
    """Start THREADS workers on one payload at once; the handler calls and the statuses."""
    calls: list[Message] = []
    statuses: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(THREADS)

    def work(n: int) -> None:
        worker = Worker(storage, "race", owner=f"w{n}")
        start.wait()
        result = worker.process(payload, calls.append)
        with lock:
            statuses.append(result.status)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return calls, statuses


def test_sixteen_workers_claim_one_ticket_exactly_one_wins(
    shared_s3_client: Any, bucket: str
) -> None:
    storage = S3Storage(shared_s3_client, bucket)
    queue = Queue("race", storage=storage)
    payloads: list[dict[str, Any]] = []
    coordinator = Coordinator(storage, "race", invoker=payloads.append)
    for round_ in range(ROUNDS):
        queue.enqueue({"round": round_})
        assert coordinator.tick().dispatched == 1
        calls, statuses = race(storage, payloads.pop())
        assert [m.body for m in calls] == [{"round": round_}]  # the handler ran once
        assert statuses.count("committed") == 1
        # the others lost the claim, or came after the commit and found it applied or gone
        assert set(statuses) - {"committed"} <= {"busy", "applied", "gone"}
        assert queue.stats()["pending"] == 0
