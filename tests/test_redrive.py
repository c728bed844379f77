"""Redrive killed at any point and run again: the message runs once more, never twice, never
lost (issue 19: found by the chaos model's operator, whose redrive died after its message PUT
and, run again, put the message a second time)."""

from __future__ import annotations

import contextlib
import itertools
from typing import Any

import pytest
from harness import Harness, Recorder
from s3queue.common.clock import FakeClock
from s3queue.errors import PermanentError
from s3queue.message import Message
from s3queue.storage import MemoryStorage


class Killed(BaseException):
    """The operator's process died."""


class DiesAt(MemoryStorage):
    """MemoryStorage whose `armed` caller dies before (or after) its `index`-th call."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.index: int | None = None
        self.after = False
        self.calls = 0

    def arm(self, index: int, *, after: bool) -> None:
        self.index, self.after, self.calls = index, after, 0

    def _step(self, applied: bool) -> None:
        if self.index is not None and self.calls == self.index and applied == self.after:
            self.index = None
            raise Killed(f"call {self.calls}")

    def __getattribute__(self, name: str) -> Any:
        found = super().__getattribute__(name)
        if name not in ("get", "head", "put", "delete", "delete_many", "list", "copy"):
            return found

        def call(*args: Any, **kwargs: Any) -> Any:
            self._step(applied=False)
            result = found(*args, **kwargs)
            self._step(applied=True)
            self.calls += 1
            return result

        return call


def poisoned(message: Message) -> None:
    if message.body.get("poison"):
        raise PermanentError("bad data")


REDRIVE_CALLS = 12
"""More storage calls than one redrive of one dead letter makes."""


@pytest.mark.parametrize("explicit", [True, False], ids=["explicit-id", "generated-id"])
@pytest.mark.parametrize("ran_between", [False, True], ids=["rerun-at-once", "drained-between"])
@pytest.mark.parametrize(
    ("index", "after"), list(itertools.product(range(REDRIVE_CALLS), (False, True)))
)
def test_a_redrive_killed_anywhere_and_run_again_runs_the_message_once(
    explicit: bool, ran_between: bool, index: int, after: bool
) -> None:
    # GIVEN a dead letter (bad data) and a fixed handler that counts runs after the death
    clock = FakeClock()
    storage = DiesAt(clock)
    h = Harness(storage=storage, clock=clock)
    message_id = h.queue.enqueue({"poison": True}, id="order-1" if explicit else None)
    h.drain(poisoned)
    handler = Recorder()
    # WHEN a redrive dies at this call (before it, or after it applied)
    storage.arm(index, after=after)
    with contextlib.suppress(Killed):
        h.queue.redrive()
    storage.index = None
    if ran_between:
        h.drain(handler)
    # AND the operator runs it again, and the queue drains
    h.queue.redrive()
    h.drain(handler)
    # THEN the message ran exactly once after its death, and the DLQ is empty
    assert [(m.id, m.attempt) for m in handler.seen] == [(message_id, 1)]
    assert h.queue.dead_letters() == []
    assert h.keys("msg/") == []


class BeforeDeadLetter(MemoryStorage):
    """MemoryStorage that runs `during` once, just before the first PUT of a dead letter:
    what others do while that applier is paused there."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.during: Any = None

    def put(self, key: str, body: bytes, **kwargs: Any) -> str:
        during, self.during = self.during, None
        if during is not None and "/dlq/" in key:
            during()
        elif during is not None:
            self.during = during
        return super().put(key, body, **kwargs)


def test_an_apply_that_wakes_up_after_a_redrive_does_not_end_the_redriven_message() -> None:
    # GIVEN an explicit id whose handler failed for good: its worker committed, and pauses
    # just before writing the dead letter
    clock = FakeClock()
    storage = BeforeDeadLetter(clock)
    h = Harness(storage=storage, clock=clock)
    h.queue.enqueue({"poison": True}, id="order-1")
    h.tick()
    [payload] = h.invocations

    def meanwhile() -> None:
        # a helper applies the committed ticket (dead letter, marker done, source retired),
        # invoked with it as it is now (a worker holding its pending copy would lose the claim
        # and leave the apply to the committer)
        again = {"queue": payload["queue"], "ticket": payload["ticket"]}
        assert h.new_worker("helper").process(again, poisoned).status == "applied"
        assert len(h.queue.dead_letters()) == 1
        # and the operator redrives it: the marker names the redriven message now
        assert h.queue.redrive() == 1

    storage.during = meanwhile
    h.work(poisoned)  # WHEN the paused applier goes on (dead letter: exists; marker: ...)
    handler = Recorder()
    h.drain(handler)
    # THEN the redriven message runs (the late apply left its marker alone)
    assert [(m.id, m.attempt) for m in handler.seen] == [("order-1", 1)]
    assert h.kinds("skip") == []
