"""Pause and resume: the stored switch, the gate in the tick, stats and the serve loop."""

from __future__ import annotations

import pytest
from harness import CountingStorage, Harness, Recorder
from s3queue.common.clock import FakeClock
from s3queue.contract.settings import QueueSettings
from s3queue.dispatching.service import ServeSettings, serve
from s3queue.errors import ConfigError
from s3queue.protocol.controls import Controls, read_controls
from s3queue.storage import MemoryStorage
from s3queue.storage.base import Storage

NOTHING_HELD = {"rate_limit": 0, "partition_rate_limit": 0, "partition_concurrency": 0, "paused": 0}


def test_a_paused_queue_accepts_enqueues_and_dispatches_nothing_until_resumed(
    storage: Storage,
) -> None:
    h = Harness(storage=storage)
    # GIVEN a paused queue
    assert not h.queue.paused()
    h.queue.pause()
    assert h.queue.paused()
    # WHEN messages are enqueued and the coordinator ticks
    ids = [h.queue.enqueue(i) for i in range(5)]
    result = h.tick()
    # THEN nothing goes out, and stats say why
    assert result.paused and result.dispatched == 0 and h.invocations == []
    stats = h.queue.stats()
    assert stats["paused"] is True and stats["pending"] == 5
    assert stats["held"] == {**NOTHING_HELD, "paused": 5}
    # WHEN it is resumed, the next tick dispatches everything
    h.queue.resume()
    assert not h.queue.paused() and h.queue.stats()["held"] == NOTHING_HELD
    handler = Recorder()
    h.drain(handler)
    assert sorted(m.id for m in handler.seen) == sorted(ids)
    assert all(m.attempt == 1 for m in handler.seen)


def test_tickets_in_flight_finish_while_paused() -> None:
    h = Harness(settings=QueueSettings(batch_size=2))
    for i in range(4):
        h.queue.enqueue(i)
    result = h.tick()
    assert result.dispatched == 4 and len(h.invocations) == 2
    # WHEN the queue is paused with both tickets out, and more is enqueued
    h.queue.pause()
    h.queue.enqueue("later")
    handler = Recorder()
    works = h.work(handler)
    # THEN the tickets out finish, the new message waits
    assert [w.status for w in works] == ["committed", "committed"]
    assert sorted(handler.bodies()) == [0, 1, 2, 3]
    assert h.tick().dispatched == 0
    assert h.queue.stats()["held"] == {**NOTHING_HELD, "paused": 1}


def test_a_reaped_ticket_s_messages_wait_while_paused() -> None:
    """A lease that expires while paused returns its messages to the queue, undelivered: they
    are not dispatched again, dead-lettered or counted until the queue resumes."""
    h = Harness(settings=QueueSettings(visibility_timeout=5, max_retries=0))
    h.queue.enqueue("x")
    assert h.tick().dispatched == 1
    h.invocations.clear()  # its worker never runs (the invoke was lost)
    h.queue.pause()
    for _ in range(10):
        h.clock.advance(10)
        assert h.tick().dispatched == 0
    assert h.queue.stats()["dead"] == 0
    h.queue.resume()
    handler = Recorder()
    h.drain(handler)
    assert handler.bodies() == ["x"]


def test_pause_is_a_deployment_setting_too() -> None:
    settings = QueueSettings.from_mapping({"paused": True})
    assert settings.paused and settings.delta() == {"paused": True}
    assert QueueSettings.from_mapping(settings.delta()) == settings
    with pytest.raises(ConfigError, match="true or false"):
        QueueSettings.from_mapping({"paused": 1})
    h = Harness(settings=settings)
    h.queue.enqueue("x")
    assert h.tick().paused and h.invocations == []


def test_an_unreadable_controls_document_reads_as_paused_and_resume_rewrites_it() -> None:
    h = Harness()
    h.storage.put(h.queue.keys.controls, b"{not json")
    assert h.queue.paused()
    h.queue.enqueue("x")
    assert h.tick().paused
    h.queue.resume()
    controls, etag = read_controls(h.storage, h.queue.keys.controls)
    assert controls == Controls(paused=False, changed_ms=h.clock.now_ms()) and etag
    assert h.tick().dispatched == 1


def test_pause_and_resume_are_idempotent_and_keep_one_document() -> None:
    h = Harness()
    h.queue.resume()  # never paused: writes the document, all off
    h.queue.pause()
    h.queue.pause()
    assert h.queue.paused()
    assert h.keys("tickets/") == [h.queue.keys.controls]


def test_a_paused_queue_lets_a_coordinator_run_end_idle() -> None:
    """A run over a paused queue with a backlog does not tick it at the busy pace forever: the
    queue is quiet, so the run ends after its linger (as the coordinator Lambda's run does)."""
    clock = FakeClock()
    h = Harness(clock=clock)
    for i in range(3):
        h.queue.enqueue(i)
    h.queue.pause()
    result = serve(
        [h.coordinator],
        remaining_ms=lambda: 60_000,
        clock=clock,
        settings=ServeSettings(linger=5.0),
    )
    assert result.reason == "idle" and result.dispatched == 0 and h.invocations == []
    assert result.ticks < 10
    assert h.queue.stats()["pending"] == 3


def test_the_switch_costs_a_get_only_when_it_changed() -> None:
    """The controls document lies beside the tickets: the tick's LIST of tickets shows its
    ETag, so a queue never paused pays nothing, and a paused one one GET per change."""
    counting = CountingStorage(MemoryStorage())
    h = Harness(storage=counting)  # type: ignore[arg-type]
    h.queue.enqueue("x")
    h.tick()
    counting.reset()
    h.tick()
    assert "GET" not in counting.reset()  # never paused: no GET of the switch
    h.queue.pause()
    counting.reset()
    h.tick()
    assert counting.reset().get("GET") == 1
    h.tick()
    assert "GET" not in counting.reset()


def test_the_idle_probe_does_not_take_the_switch_for_work() -> None:
    h = Harness()
    h.queue.pause()
    assert not h.coordinator.probe()
    h.queue.resume()
    assert not h.coordinator.probe()
    h.queue.enqueue("x")
    assert h.coordinator.probe()
