"""Unit and S3: one message at a time: peek, cancel (and its race with a dispatch), dead letters
shown, redriven and deleted by id.

The cancel race is decided by the marker's CAS (operations/messages.py): here on MemoryStorage
at each interleaving, deterministically, and on SeaweedFS with real threads.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable
from typing import Any

import pytest
from harness import QUEUE, Harness, Recorder
from s3queue import AlreadyDispatched, InvalidArgument, InvalidName, MessageNotFound
from s3queue.contract.settings import QueueSettings
from s3queue.message import Message
from s3queue.protocol.records import decode_records
from s3queue.storage import Object, Storage
from s3queue.storage.s3 import S3Storage


class Hooked:
    """A storage that runs `hook` once, at the first GET of a key `when` accepts: before the
    GET is sent, or after its answer (`after`)."""

    def __init__(
        self,
        inner: Storage,
        when: Callable[[str], bool],
        hook: Callable[[], Any],
        *,
        after: bool = False,
    ) -> None:
        self.inner, self.when, self.hook, self.after = inner, when, hook, after
        self.fired = False

    def get(self, key: str, *, if_match: str | None = None) -> Object | None:
        fire = not self.fired and self.when(key)
        self.fired = self.fired or fire
        if fire and not self.after:
            self.hook()
        obj = self.inner.get(key, if_match=if_match)
        if fire and self.after:
            self.hook()
        return obj

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


# --- peek -------------------------------------------------------------------------------------


def test_peek_shows_waiting_messages_without_taking_them() -> None:
    h = Harness()
    first = h.queue.enqueue({"n": 1}, attributes={"tenant": "acme"})
    later = h.queue.enqueue(b"\x00bytes", delay=60)
    tenant = h.queue.enqueue("t", partition="tenant-7")
    seen = h.queue.peek(10)
    assert [(m["id"], m["state"]) for m in seen] == [
        (first, "pending"),
        (later, "delayed"),
        (tenant, "pending"),
    ]
    assert seen[0]["body"] == {"n": 1} and seen[0]["attributes"] == {"tenant": "acme"}
    assert (seen[1]["body"], seen[1]["body_encoding"]) == ("AGJ5dGVz", "base64")
    assert seen[2]["partition"] == "tenant-7"
    assert [m["id"] for m in h.queue.peek(2)] == [first, later]
    assert h.queue.stats()["pending"] == 2  # nothing taken
    h.tick()
    assert {m["state"] for m in h.queue.peek(10) if m["id"] != later} == {"in_flight"}
    with pytest.raises(InvalidArgument):
        h.queue.peek(-1)


def test_peek_shows_an_inbox_object_and_a_foreign_one() -> None:
    h = Harness()
    h.storage.put(f"s3queue/{QUEUE}/inbox/a.json", b'{"x": 1}')
    h.storage.put(f"s3queue/{QUEUE}/msg/not-ours", b"garbage")
    seen = {m["key"].rsplit("/", 1)[-1]: m for m in h.queue.peek(10)}
    assert seen["a.json"]["body"] == {"x": 1}
    assert seen["not-ours"]["body_encoding"] == "undecodable"


# --- cancel -----------------------------------------------------------------------------------


def test_cancel_a_pending_and_a_delayed_message() -> None:
    h = Harness()
    h.queue.enqueue("keep", id="keep")
    h.queue.enqueue("now", id="now")
    h.queue.enqueue("later", id="later", delay=300)
    assert h.queue.cancel("now") is True
    assert h.queue.cancel("later") is True
    assert h.queue.cancel("later") is False  # already cancelled: says so, changes nothing
    assert h.queue.enqueue("later", id="later") == "later"  # the id is used up: a no-op
    handler = Recorder()
    h.drain(handler)
    assert handler.bodies() == ["keep"]
    assert h.keys("msg/") == []


def test_cancel_refuses_unknown_ids_and_messages_without_one() -> None:
    h = Harness()
    generated = h.queue.enqueue("no explicit id")
    with pytest.raises(MessageNotFound, match="explicit id"):
        h.queue.cancel(generated)
    with pytest.raises(InvalidName):
        h.queue.cancel("../etc")
    assert h.queue.stats()["pending"] == 1


def test_cancel_after_it_was_handled_says_so() -> None:
    h = Harness()
    h.queue.enqueue("x", id="done-1")
    h.drain(Recorder())
    with pytest.raises(AlreadyDispatched, match="already handled") as info:
        h.queue.cancel("done-1")
    assert info.value.state == "done"


def test_a_dispatched_message_not_yet_claimed_is_cancelled_and_never_runs() -> None:
    h = Harness()
    h.queue.enqueue("x", id="m")
    h.tick()  # in a pending ticket now
    assert h.queue.cancel("m") is True
    handler = Recorder()
    h.drain(handler)
    assert handler.seen == [] and h.keys("msg/") == [] and h.keys("tickets/") == []


def test_a_running_message_cannot_be_cancelled() -> None:
    h = Harness()
    h.queue.enqueue("x", id="m")
    answers: list[BaseException] = []

    def handler(message: Message) -> None:
        try:
            h.queue.cancel(message.id)
        except AlreadyDispatched as exc:
            answers.append(exc)

    h.drain(handler)
    [answer] = answers
    assert isinstance(answer, AlreadyDispatched) and answer.state == "started"
    assert "already dispatched" in str(answer)


def test_a_retry_in_backoff_can_be_cancelled() -> None:
    h = Harness(settings=QueueSettings(backoff_base=30, backoff_cap=30))
    h.queue.enqueue("flaky", id="m")
    handler = Recorder(fail=lambda m: RuntimeError("down"))
    h.tick()
    h.work(handler)
    [copy] = h.keys("msg/")
    assert "~o" in copy
    assert h.queue.cancel("m") is True
    assert h.keys("msg/") == []  # the copy is a tombstone now
    h.drain(handler)
    assert len(handler.seen) == 1


@pytest.mark.parametrize("winner", ["cancel", "worker"])
def test_cancel_racing_the_start_has_one_winner(winner: str) -> None:
    # GIVEN a dispatched message, and the other side's whole move slipped in between the
    # loser's read of the marker and its CAS on that version
    clock_h = Harness()
    memory = clock_h.storage
    outcome: dict[str, Any] = {}
    marker = f"s3queue/{QUEUE}/ids/m"

    def cancel() -> None:
        try:
            outcome["cancelled"] = queue_view.cancel("m")
        except AlreadyDispatched as exc:
            outcome["cancelled"] = exc

    handler = Recorder()
    if winner == "cancel":
        # the worker reads the marker, then the cancel runs to its end, then the worker's CAS
        hooked = Hooked(memory, lambda k: k == marker, cancel, after=True)
        h = Harness(storage=hooked, clock=clock_h.clock)
        queue_view = Harness(storage=memory, clock=clock_h.clock).queue
    else:
        h = Harness(storage=memory, clock=clock_h.clock)
        hooked = Hooked(memory, lambda k: k == marker, lambda: h.work(handler), after=True)
        queue_view = Harness(storage=hooked, clock=clock_h.clock).queue
    h.queue.enqueue("x", id="m")
    h.tick()
    # WHEN both go
    if winner == "cancel":
        h.work(handler)
    else:
        cancel()
    # THEN exactly one won, and the loser says so
    if winner == "cancel":
        assert outcome["cancelled"] is True and handler.seen == []
        assert [e.fields["reason"] for e in h.kinds("skip")] == ["cancelled"]
    else:
        assert isinstance(outcome["cancelled"], AlreadyDispatched)
        assert len(handler.seen) == 1
    h.drain(handler)
    assert len(handler.seen) == (0 if winner == "cancel" else 1)
    assert h.keys("msg/") == [] and h.keys("tickets/") == []


# --- dead letters by id -----------------------------------------------------------------------


def _dead(h: Harness, *bodies: str) -> list[str]:
    ids = [h.queue.enqueue(body) for body in bodies]
    h.drain(Recorder(fail=lambda m: ValueError(f"bad {m.body}")))
    return ids


def test_dead_letters_by_id_show_redrive_delete() -> None:
    h = Harness(settings=QueueSettings(max_retries=0))
    a, b, c = _dead(h, "a", "b", "c")
    shown = h.queue.dead_letter(b)
    assert shown is not None and shown["body"] == "b"
    assert "ValueError: bad b" in (shown["errors"][-1]["traceback"] or "")
    assert h.queue.dead_letter("no-such-id") is None
    assert h.queue.redrive(ids=[a]) == 1
    assert h.queue.delete_dead(ids=[b]) == 1
    assert [d["id"] for d in h.queue.dead_letters()] == [c]
    assert h.queue.delete_dead(ids=["no-such-id"]) == 0
    handler = Recorder()
    h.drain(handler)
    assert handler.bodies() == ["a"]
    assert h.queue.delete_dead() == 1 and h.queue.dead_letters() == []
    with pytest.raises(InvalidArgument):
        h.queue.redrive(ids="abc")


def test_a_deleted_dead_letter_takes_its_kept_payload() -> None:
    h = Harness(settings=QueueSettings(max_retries=0))
    h.queue.enqueue_file(io.BytesIO(b"p" * 300_000))
    h.drain(Recorder(fail=lambda m: ValueError("bad")))
    assert h.keys("dlq/~payloads/")
    assert h.queue.delete_dead() == 1
    assert h.keys("dlq/") == [] and h.keys("blobs/") == []


# --- the race on a real S3 server ---------------------------------------------------------------


@pytest.mark.s3
def test_cancel_racing_workers_on_seaweedfs(shared_s3_client: Any, bucket: str) -> None:
    # GIVEN messages each in a ticket of its own, and for each a worker and a cancel released
    # together when the worker reads the marker: both read it, then CAS it
    rounds = 8
    storage = S3Storage(shared_s3_client, bucket, sleep=lambda _: None)
    h = Harness(storage=storage, settings=QueueSettings(batch_size=1))
    ids = [h.queue.enqueue(n, id=f"m{n}") for n in range(rounds)]
    h.tick()
    payloads = list(h.invocations)
    h.invocations.clear()
    assert len(payloads) == rounds
    ran: list[str] = []
    lock = threading.Lock()
    answers: dict[str, Any] = {}

    def handler(message: Message) -> None:
        with lock:
            ran.append(message.id)

    def one_round(payload: dict[str, Any]) -> None:
        go = threading.Event()
        start = Hooked(storage, lambda k: "/ids/" in k, go.set)
        worker = Harness(storage=start, settings=QueueSettings(batch_size=1)).new_worker("w")

        def cancel() -> None:
            go.wait(60)
            try:
                answers[payload["ticket"]] = h.queue.cancel(name_of(payload))
            except AlreadyDispatched as exc:
                answers[payload["ticket"]] = exc

        canceller = threading.Thread(target=cancel)
        canceller.start()
        worker.process(payload, handler)
        go.set()
        canceller.join(60)

    def name_of(payload: dict[str, Any]) -> str:
        return by_ticket[payload["ticket"]]

    by_ticket = {p["ticket"]: _explicit_id(storage, p) for p in payloads}
    threads = [threading.Thread(target=one_round, args=(p,)) for p in payloads]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    # THEN each message either ran (and its cancel said it was too late) or was cancelled
    # (and never runs), and nothing is left half-done
    h.drain(handler)
    print("RACE", [type(a).__name__ if a is not True else "cancelled" for a in answers.values()])
    for ticket, message_id in by_ticket.items():
        answer = answers[ticket]
        if answer is True:
            assert message_id not in ran
        else:
            assert isinstance(answer, AlreadyDispatched) and ran.count(message_id) == 1
    assert sorted(ran + [by_ticket[t] for t, a in answers.items() if a is True]) == sorted(ids)
    assert h.keys("msg/") == [] and h.keys("tickets/") == []
    assert h.queue.stats()["pending"] == 0


def _explicit_id(storage: Storage, payload: dict[str, Any]) -> str:
    """The explicit id of the one message a ticket refers to."""
    obj = storage.get(payload["doc"]["refs"][0]["key"])
    assert obj is not None
    [record] = decode_records(obj.body)
    return record.id
