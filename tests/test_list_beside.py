"""A tick lists its first page of messages beside its LIST of tickets (dispatching/ahead.py),
and the race that listing one after the other ruled out stays harmless: a ticket that the
LIST of tickets shows gone, while the page still shows its messages, sends none of them out
again, and a FIFO group's retry copy is never overtaken by the group's next message."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from s3queue.common.concurrency import RunAll, Threads, in_order
from s3queue.contract.settings import QueueSettings
from s3queue.message import Message

from tests.harness import Harness, Recorder


def _page_first(h: Harness, between: Callable[[], None]) -> RunAll:
    """A run_all that, for the tick's LISTs (tickets, then pages), runs the pages first, then
    `between` (a worker finishing a ticket), then the LIST of tickets: the race's order."""

    def run_all(jobs: list[Callable[[], Any]]) -> list[Any]:
        if len(jobs) == 2 and not h.__dict__.get("raced"):
            h.__dict__["raced"] = True
            page = jobs[1]()
            between()
            return [jobs[0](), page]
        return in_order(jobs)

    return run_all


def _dispatched_ids(h: Harness) -> list[list[str]]:
    return [[r.rsplit("/", 1)[1] for r in e.fields["refs"]] for e in h.kinds("dispatch")]


def test_a_warm_leader_lists_the_page_while_it_lists_the_tickets() -> None:
    # GIVEN a leader whose last tick read its folder, with LISTs on threads
    h = Harness()
    h.queue.enqueue("first")
    h.tick()
    h.work(Recorder())
    h.queue.enqueue("second")
    msg_listing, tickets_listing = threading.Event(), threading.Event()
    inner = h.storage

    class Watch:
        def __getattr__(self, name: str) -> Any:
            return getattr(inner, name)

        def list(self, prefix: str, **kwargs: Any) -> Any:
            if prefix.endswith("/msg/"):
                msg_listing.set()
                assert tickets_listing.wait(10), "the page waited for the tickets' LIST"
            elif prefix.endswith("/tickets/"):
                tickets_listing.set()
                assert msg_listing.wait(10), "the tickets' LIST waited for the page"
            return inner.list(prefix, **kwargs)

    h.coordinator.storage = Watch()  # type: ignore[assignment]
    h.coordinator.run_all = Threads(2, "test-lists")
    # WHEN it ticks
    result = h.tick()
    # THEN both LISTs were under way at once (listed one after the other, each waits 10 s
    # for the other and fails), and the new message went out
    assert result.dispatched == 1
    assert h.work(Recorder())[0].status == "committed"


def test_a_message_of_a_ticket_gone_since_the_page_is_not_sent_out_again() -> None:
    # GIVEN a ticket in flight, and a leader warm enough to list beside its tickets
    h = Harness(settings=QueueSettings(batch_size=1))
    h.queue.enqueue("only")
    h.tick()
    recorder = Recorder()
    # WHEN the page lists the message, then the worker runs and deletes message and ticket,
    # then the LIST of tickets shows the ticket gone
    h.coordinator.run_all = _page_first(h, lambda: h.work(recorder))
    result = h.tick()
    # THEN this tick sent nothing out (the page's message was the gone ticket's), and the
    # message ran once
    assert result.dispatched == 0
    assert len(h.kinds("dispatch")) == 1
    h.tick()
    h.work(recorder)
    assert recorder.bodies() == ["only"]


def test_a_group_retry_copy_goes_out_before_the_groups_next_message() -> None:
    # GIVEN a group's first message in flight (it will fail), its next waiting behind it
    h = Harness(settings=QueueSettings(batch_size=1, backoff_base=0.001, backoff_cap=0.001))
    h.queue.enqueue("a", group="g")
    h.clock.advance(0.01)
    h.queue.enqueue("b", group="g")
    h.tick()
    assert _dispatched_ids(h) and len(_dispatched_ids(h)[0]) == 1

    def fails_once(m: Message) -> BaseException | None:
        return RuntimeError("once") if m.body == "a" and m.attempt == 1 else None

    recorder = Recorder(fail=fails_once)

    def worker_finishes() -> None:
        h.work(recorder)  # "a" fails: its retry copy is written, the ticket deleted
        h.clock.advance(0.1)

    # WHEN the page lists "a" and "b", then the ticket applies (the copy lands, "a" is gone),
    # then the LIST of tickets shows it gone
    h.coordinator.run_all = _page_first(h, worker_finishes)
    for _ in range(6):
        h.tick()
        h.work(recorder)
        h.clock.advance(0.1)
    # THEN the group kept its order: "a" again (its copy) before "b", each run once more
    assert [(m.body, m.attempt) for m in recorder.seen] == [("a", 1), ("a", 2), ("b", 1)]
