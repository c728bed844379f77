"""The local runtime: coordinator loop and worker pool in one process, on memory and SeaweedFS."""

from __future__ import annotations

import textwrap
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from s3queue import PermanentError, Queue, run_local
from s3queue.contract.settings import QueueSettings
from s3queue.errors import BucketNotFound, ConfigError
from s3queue.local.loader import load_handlers
from s3queue.local.runtime import RunSummary
from s3queue.local.seaweed import EmbeddedS3
from s3queue.message import Message
from s3queue.storage import MemoryStorage
from s3queue.storage.s3 import S3Storage

FAST = {"backoff_base": 0.05, "backoff_cap": 0.2}
"""Retry delays short enough for a test."""


class Calls:
    """Handlers that record every call, thread-safe; bodies {"fail": ...} fail as told."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def handler(self, queue: str) -> Any:
        def handle(message: Message) -> None:
            with self.lock:
                self.seen.append((queue, message.id))
            fail = message.body.get("fail") if isinstance(message.body, dict) else None
            if fail == "permanent":
                raise PermanentError("cannot ever work")
            if fail == "always":
                raise ValueError("poison")

        return handle

    def counts(self) -> Counter[tuple[str, str]]:
        with self.lock:
            return Counter(self.seen)


def test_drains_memory_queues_and_counts_outcomes() -> None:
    storage = MemoryStorage()
    emails = Queue("emails", storage=storage)
    ids = [emails.enqueue({"n": i}) for i in range(12)]
    ids += emails.enqueue_many({"n": i} for i in range(12, 40))
    poison = emails.enqueue({"fail": "always"})
    permanent = emails.enqueue({"fail": "permanent"})
    later = emails.enqueue({"n": "later"}, delay=0.3)
    calls = Calls()
    summary = run_local(
        {"emails": calls.handler("emails")},
        storage=storage,
        workers=3,
        drain=True,
        overrides={**FAST, "max_retries": 2},
        timeout=30,
    )
    assert summary.drained and summary.errors == 0
    counts = calls.counts()
    assert all(counts["emails", i] == 1 for i in [*ids, permanent, later])
    assert counts["emails", poison] == 3  # the first attempt and max_retries=2 retries
    tally = summary.queues["emails"]
    assert (tally.processed, tally.retried, tally.dead_lettered) == (41, 2, 2)
    assert tally.failed == 4 and tally.redelivered == 0
    reasons = sorted(entry["reason"] for entry in summary.dead_letters["emails"])
    assert reasons == ["PermanentError: cannot ever work", "ValueError: poison"]
    assert summary.stats["emails"]["pending"] == summary.stats["emails"]["in_flight"] == 0


def test_handler_folder_with_settings_and_overrides(tmp_path: Path) -> None:
    folder = tmp_path / "handlers"
    folder.mkdir()
    (folder / "_shared.py").write_text("PREFIX = 'seen:'\n")
    (folder / "jobs.py").write_text(
        textwrap.dedent(
            """
            from handlers._shared import PREFIX
            SETTINGS = {"max_retries": 1, "batch_size": 2}
            SEEN = []

            def handle(message):
                SEEN.append(PREFIX + str(message.body))
                if message.body == "bad":
                    raise RuntimeError("bad body")
            """
        )
    )
    loaded = load_handlers(folder, {"backoff_base": 0.01})
    assert list(loaded) == ["jobs"]
    assert loaded["jobs"].settings.max_retries == 1 and loaded["jobs"].settings.batch_size == 2
    assert loaded["jobs"].settings.backoff_base == 0.01
    storage = MemoryStorage()
    jobs = Queue("jobs", storage=storage)
    for body in ("a", "b", "c", "bad"):
        jobs.enqueue(body)
    summary = run_local(folder, storage=storage, drain=True, overrides=FAST, timeout=30)
    assert summary.queues["jobs"].processed == 3
    assert summary.queues["jobs"].retried == 1 and summary.queues["jobs"].dead_lettered == 1
    [entry] = summary.dead_letters["jobs"]
    assert entry["attempts"] == 2 and "RuntimeError: bad body" in entry["reason"]


def test_bad_handlers_are_config_errors(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text("import not_a_module_anywhere\ndef handle(m): pass\n")
    with pytest.raises(ConfigError, match=r"broken\.py: import failed: ModuleNotFoundError"):
        load_handlers(tmp_path)
    with pytest.raises(ConfigError, match="unknown settings"):
        load_handlers({"jobs": print}, {"no_such_setting": 1})
    with pytest.raises(ConfigError, match="no handlers"):
        load_handlers({})


class ListWatch(MemoryStorage):
    """MemoryStorage that signals once it has answered `count` LISTs."""

    def __init__(self, count: int) -> None:
        super().__init__()
        self.count, self.reached = count, threading.Event()

    def list(self, prefix: str, *, start_after: str | None = None, limit: int = 1000) -> Any:
        self.count -= 1
        if self.count <= 0:
            self.reached.set()
        return super().list(prefix, start_after=start_after, limit=limit)


def test_work_enqueued_while_idle_starts_within_a_second() -> None:
    # GIVEN a runtime on an empty queue, idle long enough for its probes to back off fully
    storage = ListWatch(count=6)
    handled, stop = threading.Event(), threading.Event()
    runner = threading.Thread(
        target=lambda: run_local({"jobs": lambda m: handled.set()}, storage=storage, stop=stop)
    )
    runner.start()
    try:
        assert storage.reached.wait(10)
        # WHEN a message arrives
        Queue("jobs", storage=storage).enqueue("late")
        # THEN it is handled (within about one idle interval, LOCAL_SERVE.max_idle_interval;
        # the benchmark measures that latency, tests do not time it)
        assert handled.wait(10)
    finally:
        stop.set()
        runner.join()


def test_stop_and_timeout_end_a_run_without_drain() -> None:
    storage = MemoryStorage()
    stop = threading.Event()
    stop.set()
    summary = run_local({"jobs": print}, storage=storage, stop=stop)
    assert not summary.drained
    summary = run_local({"jobs": print}, storage=storage, timeout=0.3)
    assert not summary.drained and summary.elapsed >= 0.3


@pytest.mark.s3
def test_a_small_client_pool_is_named_and_the_runtime_sizes_its_own(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import boto3
    from s3queue.local.runtime import LOCAL_COORDINATION, _s3_storage, connections
    from s3queue.storage.clients import pool_size

    needed = connections(3, 4, LOCAL_COORDINATION)
    assert needed > 10  # boto3's default pool
    # GIVEN a plain boto3 client, as a user would make one (10 connections)
    plain = boto3.session.Session().client(
        "s3", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s"
    )
    # WHEN run_local would use it, THEN it says how many it needs and how to get them
    with caplog.at_level("WARNING", logger="s3queue.local.runtime"):
        _s3_storage("b", plain, needed)
    assert f"keeps 10 connections, but this runtime makes up to {needed}" in caplog.text
    # AND a client of its own has room for every request it makes at once
    own = _s3_storage("b", None, needed)
    assert isinstance(own, S3Storage) and pool_size(own._client) == needed


def test_missing_bucket_fails_fast(seaweed: EmbeddedS3, shared_s3_client: Any) -> None:
    with pytest.raises(BucketNotFound):
        run_local({"jobs": print}, bucket="no-such-bucket-here", s3=shared_s3_client)


@pytest.mark.s3
def test_example_handlers_end_to_end_on_seaweedfs(
    seaweed: EmbeddedS3, shared_s3_client: Any, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("S3QUEUE_OUTBOX", raising=False)
    storage = S3Storage(shared_s3_client, bucket)
    emails = Queue("send_email", storage=storage)
    reports = Queue("generate_report", storage=storage)
    emails.enqueue({"to": "ada@example.com", "template": "welcome", "name": "Ada"})
    emails.enqueue({"to": "not an address", "template": "welcome", "name": "X"})
    reports.enqueue_many({"values": [i, i + 1]} for i in range(10))
    reports.enqueue({"values": []})
    shared_s3_client.put_object(
        Bucket=bucket,
        Key="s3queue/send_email/inbox/from-another-service.json",
        Body=b'{"to": "grace@example.com", "template": "password_reset", "name": "Grace"}',
    )
    handlers = Path(__file__).parents[1] / "functions" / "handlers"
    summary = run_local(
        handlers, bucket=bucket, s3=shared_s3_client, drain=True, overrides=FAST, timeout=60
    )
    assert summary.drained
    assert summary.queues["send_email"].processed == 2
    assert summary.queues["send_email"].dead_lettered == 1  # PermanentError: no retries
    assert summary.queues["send_email"].retried == 0
    assert summary.queues["generate_report"].processed == 10
    assert summary.queues["generate_report"].retried == QueueSettings(max_retries=3).max_retries
    [dead] = summary.dead_letters["generate_report"]
    assert dead["attempts"] == 4 and dead["reason"].startswith("ValueError: nothing to aggregate")


@pytest.mark.s3
def test_three_runtimes_on_one_bucket_handle_each_message_once(
    seaweed: EmbeddedS3, shared_s3_client: Any, bucket: str
) -> None:
    # GIVEN a backlog on two queues, with one poison message
    storage = S3Storage(shared_s3_client, bucket)
    expected: dict[tuple[str, str], int] = {}
    for name in ("alpha", "beta"):
        queue = Queue(name, storage=storage)
        for i in range(15):
            expected[name, queue.enqueue({"n": i})] = 1
        for message_id in queue.enqueue_many({"n": i} for i in range(15, 30)):
            expected[name, message_id] = 1
    poison = Queue("alpha", storage=storage).enqueue({"fail": "always"})
    expected["alpha", poison] = 3
    calls = Calls()
    summaries: list[RunSummary] = []

    # WHEN three runtimes, each with its own coordinator loop and workers, run on the bucket
    def runtime() -> None:
        summaries.append(
            run_local(
                {name: calls.handler(name) for name in ("alpha", "beta")},
                bucket=bucket,
                s3=seaweed.make_client(),
                workers=3,
                drain=True,
                overrides={**FAST, "max_retries": 2, "batch_size": 4},
                timeout=60,
            )
        )

    threads = [threading.Thread(target=runtime) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # THEN every message ran exactly once, and the poison one 1 + max_retries times, then DLQ
    assert len(summaries) == 3 and all(s.drained for s in summaries)
    assert calls.counts() == Counter(expected)
    total = sum(s.queues["alpha"].processed + s.queues["beta"].processed for s in summaries)
    assert total == 60
    assert sum(s.queues["alpha"].retried for s in summaries) == 2
    [dead] = Queue("alpha", storage=storage).dead_letters()
    assert dead["id"] == poison and dead["attempts"] == 3
    assert sum(s.queues[q].redelivered for s in summaries for q in ("alpha", "beta")) == 0
