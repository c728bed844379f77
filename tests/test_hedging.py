"""Hedged LISTs (storage/hedging.py): a LIST still out after most recent ones answered is sent
again and the first answer is used; a coordinator's tick lists through them."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import pytest
from s3queue.common.clock import SystemClock
from s3queue.common.concurrency import Threads, in_order, wait_any
from s3queue.dispatching.coordinator import Coordinator
from s3queue.errors import StorageError
from s3queue.storage import hedging
from s3queue.storage.base import Page
from s3queue.storage.hedging import HedgedLists, hedged
from s3queue.storage.memory import MemoryStorage

WAIT_S = 10.0
"""Longest any test waits for a thread it released (never reached when the code is right)."""


class Gated(MemoryStorage):
    """A bucket whose first `hold` LISTs wait until a later LIST starts (a hedge lets the
    attempt it hedges go); `fail_held`, `fail_all`: which of them raise."""

    def __init__(self) -> None:
        super().__init__()
        self.hold = 0
        self.release = threading.Event()
        self.lists = 0
        self.fail_held = self.fail_all = False
        self._lock = threading.Lock()

    def list(self, prefix: str, *, start_after: str | None = None, limit: int = 1000) -> Page:
        with self._lock:
            self.lists += 1
            held = self.lists <= self.hold
        if held:
            assert self.release.wait(WAIT_S), "a held LIST was never hedged"
        else:
            self.release.set()
        if self.fail_all or (held and self.fail_held):
            raise StorageError("ListObjectsV2 failed: as told")
        return super().list(prefix, start_after=start_after, limit=limit)


def warmed(storage: Gated, samples: int = hedging.MIN_SAMPLES) -> HedgedLists:
    """Hedged LISTs on `storage` that have seen `samples` quick LISTs (so the threshold is
    `FLOOR_MS`)."""
    lists = HedgedLists(storage, Threads(4, "test-hedge").submit, SystemClock())
    for _ in range(samples):
        lists.list("q/")
    storage.lists = 0
    storage.release.clear()
    return lists


def test_a_slow_list_is_sent_again_and_the_second_answer_is_used() -> None:
    storage = Gated()
    storage.put("q/a", b"1")
    lists = warmed(storage)
    storage.hold = 1  # the next LIST hangs until its hedge starts
    page = lists.list("q/")
    assert [e.key for e in page.entries] == ["q/a"]
    assert storage.lists == 2 and lists.sent == 1


def test_no_hedge_before_enough_lists_were_seen() -> None:
    storage = Gated()
    lists = warmed(storage, samples=hedging.MIN_SAMPLES - 1)
    assert lists.threshold_ms() is None
    lists.list("q/")
    assert storage.lists == 1 and lists.sent == 0


def test_a_hedge_whose_first_attempt_failed_answers_with_the_second() -> None:
    storage = Gated()
    storage.put("q/a", b"1")
    lists = warmed(storage)
    storage.hold, storage.fail_held = 1, True  # held until hedged, then it fails
    page = lists.list("q/")
    assert [e.key for e in page.entries] == ["q/a"]


def test_a_list_that_fails_both_times_raises() -> None:
    storage = Gated()
    lists = warmed(storage)
    storage.hold, storage.fail_all = 1, True
    with pytest.raises(StorageError, match="as told"):
        lists.list("q/")
    assert storage.lists == 2


def test_the_threshold_is_the_quantile_of_recent_lists_and_never_below_the_floor() -> None:
    lists = HedgedLists(MemoryStorage(), Threads(1, "t").submit, SystemClock())
    lists._recent.extend(float(ms) for ms in range(1, 101))
    assert lists.threshold_ms() == 80.0
    lists._recent.clear()
    lists._recent.extend([1.0] * hedging.MIN_SAMPLES)
    assert lists.threshold_ms() == hedging.FLOOR_MS


def test_everything_else_passes_through() -> None:
    storage = MemoryStorage()
    lists = HedgedLists(storage, Threads(1, "t").submit, SystemClock())
    etag = lists.put("q/a", b"1", if_none_match=True)
    got = lists.get("q/a")
    assert got is not None and got.etag == etag and lists.head("q/a") is not None
    lists.delete_many(["q/a"])
    assert storage.get("q/a") is None
    assert hedged(storage, None, SystemClock()) is storage


def test_wait_any_returns_false_once_its_timeout_passed() -> None:
    pending: Future[int] = Future()
    assert wait_any([pending], timeout_s=0.01) is False
    pending.set_result(1)
    assert wait_any([pending], timeout_s=0.01) is True


def test_a_coordinator_lists_through_its_hedge() -> None:
    storage = Gated()
    lists_seen: list[str] = []

    class Counting(Threads):
        def submit(self, job):  # type: ignore[no-untyped-def]
            lists_seen.append("submitted")
            return super().submit(job)

    coordinator = Coordinator(
        storage,
        "q",
        invoker=lambda _inv: None,
        run_all=in_order,
        hedge=Counting(4, "test-hedge").submit,
    )
    assert isinstance(coordinator.reads, HedgedLists)
    for _ in range(2 * hedging.MIN_SAMPLES):  # each tick LISTs at least its tickets
        coordinator.tick()
    assert lists_seen, "no LIST of a tick went through the hedge's pool"
