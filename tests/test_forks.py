"""Processes forked after ``import s3queue``: nothing a child writes may pass for its parent's or
a sibling's (write tokens, message ids), and forked runtimes share a queue's work exactly once."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from s3queue import Queue, run_local
from s3queue.common.concurrency import Threads
from s3queue.local.seaweed import EmbeddedS3
from s3queue.message import Message
from s3queue.producing.batching import _Batch
from s3queue.protocol.keys import new_id
from s3queue.storage import MemoryStorage, new_token
from s3queue.storage.s3 import S3Storage


def in_children(count: int, job: Callable[[int], str]) -> list[str]:
    """Fork `count` children after everything above was imported and used; each runs `job`
    and sends back its result; the parent waits for all of them (no sleeping)."""
    pids: list[tuple[int, int]] = []
    for index in range(count):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            code = 1
            try:
                os.close(read)
                os.write(write, job(index).encode())
                code = 0
            finally:
                os._exit(code)
        os.close(write)
        pids.append((pid, read))
    results = []
    for pid, read in pids:
        with os.fdopen(read, "rb") as pipe:
            results.append(pipe.read().decode())
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    return results


def test_tokens_and_ids_drawn_in_forked_children_differ() -> None:
    # GIVEN a parent that drew tokens and ids (its counter and last id are past zero; its last
    # id is a millisecond ahead of what the children ask for, so theirs would all be last + 1)
    parent = [new_token() for _ in range(3)]
    last_id = new_id(1_700_000_000_001)
    # WHEN three children forked now draw theirs
    children = in_children(
        3, lambda _: json.dumps([new_token(), new_token(), new_id(1_700_000_000_000)])
    )
    mine = [new_token(), new_token(), new_id(1_700_000_000_000)]
    drawn = [json.loads(text) for text in children] + [mine]
    # THEN no token or id of any process is another's, and each process has its own random part
    tokens = parent + [t for d in drawn for t in d[:2]]
    ids = [last_id] + [d[2] for d in drawn]
    assert len(set(tokens)) == len(tokens)
    assert len(set(ids)) == len(ids)
    assert len({t.split("-")[0] for t in tokens}) == 4


def test_a_thread_pool_used_before_the_fork_works_in_the_child() -> None:
    # GIVEN a pool whose threads ran jobs in the parent (a child has none of those threads)
    pool = Threads(1, "test")
    assert pool([lambda: 1, lambda: 2]) == [1, 2]
    # WHEN a forked child runs jobs on it THEN they run (a pool inherited as is never would)
    assert in_children(1, lambda _: json.dumps(pool([lambda: 3, lambda: 4]))) == ["[3, 4]"]


def test_a_batch_open_at_the_fork_is_not_joined_by_the_child() -> None:
    # GIVEN a group commit whose batch was open when the process forked (its leader, a thread
    # of the parent, does not exist in the child)
    queue = Queue("jobs", storage=MemoryStorage())
    batch = queue.batching(window=0)
    batch._open = _Batch()  # as if another thread of the parent were leading it right now

    # WHEN the child enqueues through it THEN it leads a batch of its own and returns
    def child(_: int) -> str:
        batch.enqueue({"from": "child"})
        return json.dumps(queue.stats()["pending"])

    assert in_children(1, child) == ["1"]


class Burner:
    """A process that keeps one core busy, so the forked runtimes race on a loaded machine."""

    def __enter__(self) -> Burner:
        self.process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        return self

    def __exit__(self, *exc: object) -> None:
        self.process.kill()
        self.process.wait()


@pytest.mark.s3
def test_three_forked_runtimes_run_every_message_once(seaweed: EmbeddedS3, bucket: str) -> None:
    # GIVEN a parent that imported s3queue and enqueued, through a storage it keeps using
    storage = S3Storage(seaweed.make_client(), bucket)
    queue = Queue("jobs", storage=storage)
    ids = [queue.enqueue({"n": i}) for i in range(90)]
    ids += queue.enqueue_many([{"n": i} for i in range(90, 120)])
    # The first process to run a message holds its handlers until another process has run one
    # (or 60 s pass): a runtime that got the lease and its own threads' tickets fast enough ran
    # all 120 alone, and "the work was shared" failed for no fault of the sharing. Held, its
    # tickets wait in S3, where only the other processes can take them.
    fork = multiprocessing.get_context("fork")
    opener, lock, shared = fork.Value("i", 0), fork.Lock(), fork.Event()
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "runs.log"

        def handle(message: Message) -> None:
            line = json.dumps([message.id, message.attempt, message.redelivered, os.getpid()])
            fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            try:
                os.write(fd, (line + "\n").encode())  # one append: atomic between processes
            finally:
                os.close(fd)
            with lock:
                if not opener.value:
                    opener.value = os.getpid()
                elif opener.value != os.getpid():
                    shared.set()
            if opener.value == os.getpid():
                shared.wait(60)

        def runtime(_: int) -> str:
            summary = run_local(
                {"jobs": handle},
                storage=storage,  # the parent's, with its pooled connections
                workers=3,
                drain=True,
                overrides={"batch_size": 2, "backoff_base": 0.05, "backoff_cap": 0.2},
                timeout=120,
            )
            return json.dumps(summary.drained)

        # WHEN three processes forked after all that run the queue, beside a busy core
        with Burner():
            drained = in_children(3, runtime)
        runs: list[list[Any]] = [json.loads(line) for line in log.read_text().splitlines()]
    # THEN every message ran, and a second run of one only ever as a counted redelivery
    assert all(json.loads(d) for d in drained)
    first = [run for run in runs if run[1] == 1 and not run[2]]
    assert sorted(run[0] for run in first) == sorted(ids)
    assert {run[0] for run in runs} == set(ids)
    assert len({run[3] for run in runs}) >= 2  # the work was shared
