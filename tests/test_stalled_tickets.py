"""Unit: a ticket whose holders keep dying before they record anything reads less far ahead.

Issue 22's liveness gap: in the chaos suite's ``clocks`` profile a grown ticket (250 objects)
went through 200 generations, every holder crashed in its burst of 250 GETs before its first
handler, and nothing changed from one generation to the next (readahead.py, `stalled_window`).
"""

from __future__ import annotations

from typing import Any

import pytest
from harness import Crash, Harness, Recorder
from s3queue.common.clock import FakeClock
from s3queue.contract.settings import QueueSettings
from s3queue.message import Message
from s3queue.protocol.tickets import Outcome, Ref, Ticket
from s3queue.storage import MemoryStorage
from s3queue.working.readahead import READ_WINDOW, stalled_window

VIS = 30.0


def ticket(refs: int = 4) -> Ticket:
    return Ticket("q", 1, 0, [Ref(f"k{i}", "e", 1) for i in range(refs)], 0)


def test_only_generations_that_recorded_nothing_count_as_stalls() -> None:
    t = ticket()
    assert t.stalls() == 0 and stalled_window(t) == READ_WINDOW
    t.expire(1)  # a first delivery that saved nothing
    assert t.stalls() == 1 and stalled_window(t) == READ_WINDOW // 2
    t.outcomes.append(Outcome("k0", "id0", "done", 2))
    t.expire(3)  # this one saved an outcome: progress, not a stall
    assert t.stalls() == 1
    t.expire(4)
    t.expire(5)
    assert t.stalls() == 3 and stalled_window(t) == READ_WINDOW // 8
    for at in range(6, 40):
        t.expire(at)
    assert stalled_window(t) == 1  # never 0: a holder always reads the object it runs next


def test_expiries_written_by_an_older_version_count_no_stall() -> None:
    t = ticket()
    t.history.append({"event": "expired", "gen": 0, "at": 1})  # no "done": an older writer
    assert t.stalls() == 0
    t.expire(2)  # compared with nothing before it: no outcome at all is a stall
    assert t.stalls() == 1


class DiesInABurst(MemoryStorage):
    """A worker that dies when it has more than `limit` message objects read and not yet run
    (a burst of GETs at once: each is a chance to die, as in the chaos suite's crashes)."""

    def __init__(self, clock: FakeClock, limit: int) -> None:
        super().__init__(clock)
        self.limit, self.ahead, self.deaths = limit, 0, 0

    def get(self, key: str, *, if_match: Any = None) -> Any:
        if "/msg/" in key:
            self.ahead += 1
            if self.ahead > self.limit:
                self.ahead, self.deaths = 0, self.deaths + 1
                raise Crash()
        return super().get(key, if_match=if_match)


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_ticket_whose_holders_die_in_their_reads_still_drains(when: str) -> None:
    """An invoked first delivery reads its window ahead before it claims (start.py): its
    holders die before the claim, the ticket stays pending and the leader invokes it again
    (`Invocation.stalls`). A pulled one reads after its claim: the leader reaps it."""
    # GIVEN one ticket of 64 messages, whose holders die whenever more than 6 of its objects
    # are read ahead of the handler (the window is 256: every first delivery dies so)
    clock = FakeClock()
    storage = DiesInABurst(clock, limit=6)
    settings = QueueSettings(visibility_timeout=VIS, max_retries=3, batch_size=64)
    h = Harness(storage=storage, clock=clock, settings=settings)
    for i in range(64):
        h.queue.enqueue(f"m{i}")
    handler = Recorder()

    def run(m: Message) -> None:
        storage.ahead -= 1  # its object is no longer ahead of the handler
        handler(m)

    h.tick()
    # WHEN each holder dies, and the ticket is invoked again or reaped, again and again
    for deaths in range(8):
        if when == "before":  # each invoke again says how many went before it
            assert h.invocations[0].get("stalls", 0) == deaths
        if when == "after":
            h.invocations[0]["pulled"] = True
        try:
            h.work(run)
        except Crash:
            h.clock.advance(VIS + h.coordination.skew_tolerance + 1)
            assert h.tick().reaped == (when == "after")
            assert len(h.invocations) == 1
            continue
        break
    # THEN each death halved the window, until a holder lived through its reads (256, 128,
    # 64, 32, 16, 8 ahead: six deaths, then 4 ahead at most)
    assert storage.deaths == 6
    # (a pulled first delivery runs its first message before its reads ahead: m0 ran then)
    again = ["m0"] if when == "after" else []
    ran = sorted(handler.bodies(), key=lambda b: int(b[1:]))
    assert ran == sorted([f"m{i}" for i in range(64)] + again, key=lambda b: int(b[1:]))
    assert h.keys("msg/") == [] and h.keys("tickets/") == []
    assert h.queue.dead_letters() == []  # no delivery counted beyond the claim's first message
