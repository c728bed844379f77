"""Unit: the life of messages through coordinator and worker, on MemoryStorage."""

from __future__ import annotations

from harness import QUEUE, Harness, Recorder
from s3queue.contract.settings import QueueSettings
from s3queue.protocol.records import encode_records, record_for


def test_enqueue_dispatch_handle_delete() -> None:
    h = Harness()
    message_id = h.queue.enqueue({"to": "a@example.com"})
    result = h.tick()
    assert result.dispatched == 1 and len(h.invocations) == 1
    handler = Recorder()
    [work] = h.work(handler)
    assert work.status == "committed" and work.count("done") == 1
    [message] = handler.seen
    assert message.id == message_id
    assert message.body == {"to": "a@example.com"}
    assert message.attempt == 1 and message.group is None and message.queue == QUEUE
    assert message.idempotency_key == f"{QUEUE}:{message_id}"
    assert message.enqueued_at.timestamp() * 1000 == h.clock.now_ms()
    assert h.keys() == [h.queue.keys.lease]  # message and ticket gone; only the lease remains


def test_batches_of_batch_size() -> None:
    h = Harness(settings=QueueSettings(batch_size=10))
    for i in range(25):
        h.queue.enqueue(i)
    assert h.tick().dispatched == 25
    sizes = [len(p["doc"]["refs"]) for p in h.invocations]
    assert sizes == [10, 10, 5]
    handler = Recorder()
    h.work(handler)
    assert sorted(handler.bodies()) == list(range(25))


def test_backpressure_limits_live_tickets() -> None:
    h = Harness(settings=QueueSettings(batch_size=5, max_batch_size=5, max_in_flight_tickets=2))
    for i in range(30):
        h.queue.enqueue(i)
    first = h.tick()
    assert first.dispatched == 10 and first.live_tickets == 2 and first.waiting > 0
    assert h.tick().dispatched == 0  # nothing finished, nothing more goes out
    h.work(Recorder())
    assert h.tick().dispatched == 10
    assert h.drain(Recorder()) >= 1
    assert h.queue.stats()["pending"] == 0


def test_enqueue_many_is_one_object_and_one_ticket() -> None:
    h = Harness()
    ids = h.queue.enqueue_many(range(100))
    assert len(ids) == len(set(ids)) == 100
    assert len(h.keys("msg/")) == 1
    assert h.tick().dispatched == 100
    assert len(h.invocations) == 1
    handler = Recorder()
    [work] = h.work(handler)
    assert work.count("done") == 100
    assert handler.bodies() == list(range(100))
    assert [m.id for m in handler.seen] == ids
    assert h.keys("msg/") == []


def test_delay_holds_message_until_due() -> None:
    h = Harness()
    h.queue.enqueue("later", delay=10)
    assert h.tick().dispatched == 0
    assert h.queue.stats()["delayed"] == 1
    h.clock.advance(9.9)
    assert h.tick().dispatched == 0
    h.clock.advance(0.1)
    assert h.tick().dispatched == 1


def test_bytes_and_json_bodies_round_trip() -> None:
    h = Harness()
    h.queue.enqueue(b"\x00\xffraw")
    h.queue.enqueue([1, "two", {"three": None}])
    h.tick()
    handler = Recorder()
    h.work(handler)
    assert handler.bodies() == [b"\x00\xffraw", [1, "two", {"three": None}]]


def test_explicit_id_enqueue_is_idempotent() -> None:
    h = Harness()
    assert h.queue.enqueue("once", id="order-42") == "order-42"
    assert h.queue.enqueue("once", id="order-42") == "order-42"
    assert h.queue.stats()["pending"] == 1
    handler = Recorder()
    h.drain(handler)
    assert handler.bodies() == ["once"]
    h.queue.enqueue("once", id="order-42")  # after it was handled: still a no-op
    h.drain(handler)
    assert handler.bodies() == ["once"]


def test_explicit_id_survives_a_crash_between_marker_and_message() -> None:
    # GIVEN the first enqueue wrote its marker and died before the message PUT
    h = Harness()
    key = h.queue.keys.msg_key(
        __import__("s3queue.protocol.keys", fromlist=["MsgKey"]).MsgKey(h.clock.now_ms(), "x1")
    )
    h.storage.put(
        h.queue.keys.marker("x1"),
        b'{"v":1,"token":"t","state":"pending","key":"%s"}' % key.encode(),
        if_none_match=True,
    )
    # WHEN the producer retries, THEN the message exists exactly once and is handled once
    h.queue.enqueue("payload", id="x1")
    handler = Recorder()
    h.drain(handler)
    assert handler.bodies() == ["payload"]


def test_idle_probe_costs_one_list() -> None:
    h = Harness()
    assert h.coordinator.probe() is False
    h.queue.enqueue("x", delay=60)
    assert h.coordinator.probe() is False  # delayed messages alone are not work
    h.queue.enqueue("y")
    assert h.coordinator.probe() is True


def test_stats_counts() -> None:
    h = Harness(settings=QueueSettings(batch_size=2, max_in_flight_tickets=1))
    for i in range(5):
        h.queue.enqueue(i)
    h.queue.enqueue("d", delay=30)
    h.tick()
    stats = h.queue.stats()
    assert (stats["pending"], stats["in_flight"], stats["delayed"], stats["dead"]) == (3, 2, 1, 0)
    assert stats["tickets"] == 1


def test_inbox_and_library_messages_share_capacity_without_losing_either() -> None:
    h = Harness(settings=QueueSettings(batch_size=1, max_in_flight_tickets=2))
    for i in range(3):
        h.storage.put(h.queue.keys.inbox + f"ext-{i}.json", b'{"from": "elsewhere"}')
    h.clock.advance(1)
    for i in range(3):
        h.queue.enqueue(i)
    handler = Recorder()
    h.drain(handler, step=0.1, rounds=20)  # well before a 60 s sweep could help
    assert sorted(map(str, handler.bodies())) == sorted(
        ["0", "1", "2"] + ["{'from': 'elsewhere'}"] * 3
    )


def test_idle_probe_with_a_page_of_delayed_messages() -> None:
    h = Harness()
    h.queue.enqueue_many([])
    for i in range(1001):
        h.queue.enqueue(i, delay=3600)
    assert h.coordinator.probe() is False  # two LISTs: the page, then tickets/
    h.queue.enqueue("now", delay=0)
    assert h.coordinator.probe() is True


def test_idle_probe_reads_past_a_page_of_tombstones_and_of_retries_in_backoff() -> None:
    """The probe took a full page of tombstones (consumed copies, kept an hour) for a page of
    future messages and said "idle": no tick ran, so none deleted them, and the ready message
    behind them waited for ever (soak seed 424249: 300 messages stuck)."""
    for early in ("tombstones", "backoff"):
        h = Harness()
        for i in range(1001):
            name = f"{1_700_000_000_000 + i:013d}-{i:026d}~gZw"
            if early == "tombstones":
                h.storage.put(h.queue.keys.msg + name + "~o0000000001-0000000001", b"")
            else:  # a grouped retry copy keeps its old place, due in an hour
                body = encode_records([record_for(f"r{i}", i, 0, "g")], "t")
                h.storage.put(h.queue.keys.msg + name + "~n1700003600000", body)
        h.clock.advance(5)
        assert h.coordinator.probe() is False, early  # nothing ready yet
        h.queue.enqueue("now")
        assert h.coordinator.probe() is True, early


def test_a_handled_explicit_id_message_put_again_is_skipped_not_run() -> None:
    # GIVEN an explicit-id message handled (its marker done), then put again by a repeated
    # enqueue that read the marker just before it was marked done
    h = Harness()
    h.queue.enqueue("once", id="order-7")
    [key] = h.keys("msg/")
    body = h.storage.get(key)
    assert body is not None
    handler = Recorder()
    h.drain(handler)
    h.storage.put(key, body.body, if_none_match=True)
    # WHEN it is dispatched again, THEN it is retired without running, and not as "done"
    h.drain(handler)
    assert handler.bodies() == ["once"]
    [skip] = h.kinds("skip")
    assert skip.fields["message_id"] == "order-7"
    commits = [dict(e.fields["outcomes"]) for e in h.kinds("commit")]
    assert commits == [{"order-7": "done"}, {"order-7": "skip"}]
    assert h.keys("msg/") == []
