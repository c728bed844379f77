"""Invokes sent in the background (dispatching/invoke.py, `Background`): a tick waits for its
tickets' PUTs, never for Lambda's answers, and a run drains what it sent before it ends."""

from __future__ import annotations

import threading
from typing import Any

from harness import QUEUE, Harness, Recorder
from s3queue.common.concurrency import Threads
from s3queue.dispatching.coordinator import Coordinator
from s3queue.dispatching.invoke import Background
from s3queue.errors import InvokeFailed


class SlowInvoker:
    """An invoker whose calls wait until `answer` is set (or 10 s pass)."""

    def __init__(self) -> None:
        self.answer = threading.Event()
        self.sent: list[dict[str, Any]] = []
        self.timed_out = False

    def __call__(self, invocation: dict[str, Any]) -> None:
        if not self.answer.wait(10):
            self.timed_out = True
        self.sent.append(invocation)


def coordinator(h: Harness, invoker: Any, send: Background) -> Coordinator:
    return Coordinator(
        h.storage,
        QUEUE,
        invoker=invoker,
        settings=h.settings,
        coordination=h.coordination,
        clock=h.clock,
        owner="c-bg",
        listener=h.events.append,
        send=send,
    )


def test_a_tick_returns_before_lambda_answers_its_invokes() -> None:
    # GIVEN a coordinator whose invokes go out in the background, and Lambda slow to answer
    h = Harness()
    for n in range(3):
        h.queue.enqueue({"n": n})
    invoker = SlowInvoker()
    sent = Background(Threads(4, "test-invoke").submit)
    # WHEN it ticks
    result = coordinator(h, invoker, sent).tick()
    # THEN the tick dispatched and returned while the invoke was still unanswered
    assert result.dispatched == 3
    assert invoker.sent == []
    # AND draining waits for it: the worker then runs the ticket as sent
    invoker.answer.set()
    sent.drain()
    assert not invoker.timed_out
    [payload] = invoker.sent
    handler = Recorder()
    assert h.worker.process(payload, handler).status == "committed"
    assert sorted(m.body["n"] for m in handler.seen) == [0, 1, 2]


def test_a_failed_background_invoke_is_reported_and_retried_later() -> None:
    # GIVEN invokes that fail, sent in the background
    h = Harness()
    h.queue.enqueue("x")

    def refuse(invocation: dict[str, Any]) -> None:
        raise InvokeFailed(f"throttled: {invocation['ticket']}")

    sent = Background(Threads(2, "test-invoke").submit)
    c = coordinator(h, refuse, sent)
    # WHEN a tick publishes the ticket and the run drains its invokes
    assert c.tick().dispatched == 1
    sent.drain()
    # THEN the failure was reported as a synchronous one is
    [failed] = h.kinds("invoke_failed")
    assert "throttled" in failed.fields["error"]
    # AND once dispatch_timeout passes without a claim, the ticket is invoked again
    c.reconciler.invoker = h.invocations.append
    h.clock.advance(h.coordination.dispatch_timeout + 1)
    c.tick()
    sent.drain()
    assert [p["ticket"] for p in h.invocations] == [failed.fields["ticket"]]
    h.work(Recorder())
    assert h.keys("msg/") == []


def test_drain_waits_for_jobs_sent_while_it_drains() -> None:
    sent = Background(Threads(2, "test-invoke").submit)
    done: list[int] = []
    gate = threading.Event()

    def first() -> None:
        gate.wait(10)
        sent(lambda: done.append(2))  # sent by a job still running when drain began
        done.append(1)

    sent(first)
    gate.set()
    sent.drain()
    assert sorted(done) == [1, 2]
