"""Unit: a puller that shares its queue with other processes loses few claims (issue 22, item 4).

Three processes on one queue made more requests per message than one: most of the extra were
claims lost to another process (a lost claim is a lease GET, a first-object GET, the PUT, a
HEAD and a GET of the ticket; with an invoked payload's window of reads besides), nearly all
by payloads `take` handed out from what a poll had listed up to a second before.
"""

from __future__ import annotations

import threading
from typing import Any

from harness import QUEUE, CountingStorage, Harness, Recorder
from s3queue.contract.settings import QueueSettings
from s3queue.storage.base import Storage
from s3queue.working.pull import (
    CONTESTED_MS,
    SPREAD,
    TRUST_CONTESTED_MS,
    TRUST_MS,
    Puller,
)


def test_a_puller_that_saw_another_process_claim_trusts_its_listing_for_less() -> None:
    # GIVEN a puller that listed three pending tickets (it offered one, then forgot it)
    h = Harness(settings=QueueSettings(batch_size=1))
    for body in "abc":
        h.queue.enqueue(body)
    h.tick()
    puller = Puller(h.storage, h.queue.keys, h.clock)
    puller.forget(puller.poll(1)[0])
    seen: list[object] = []

    def handler(message: object) -> None:
        # WHEN its next poll finds one of them claimed by another process
        puller.forget(puller.poll(1)[0])
        h.clock.advance(TRUST_CONTESTED_MS / 1000)
        seen.append(puller.take(1))
        seen.append(puller.stale())

    assert h.new_worker("w2").process(h.invocations[1], handler).status == "committed"
    # THEN what it listed is trusted TRUST_CONTESTED_MS, not TRUST_MS: a LIST must confirm it
    assert TRUST_CONTESTED_MS < TRUST_MS
    assert seen == [[], True]
    assert len(puller.poll(1)) == 1


def test_a_lost_claim_makes_a_leaders_learnt_tickets_trusted_for_less_for_a_while() -> None:
    # GIVEN a leader's process that learnt two tickets its coordinator published
    h = Harness(settings=QueueSettings(batch_size=1))
    h.queue.enqueue("a")
    h.queue.enqueue("b")
    h.tick()
    first, second = h.invocations
    counted = CountingStorage(h.storage)
    puller = Puller(counted, h.queue.keys, h.clock)  # type: ignore[arg-type]
    puller.learn(first)
    puller.learn(second)
    # WHEN one of its threads lost a claim to another process
    puller.lost()
    h.clock.advance(TRUST_CONTESTED_MS / 1000)
    # THEN it hands out nothing it has not listed within TRUST_CONTESTED_MS
    assert puller.take(2) == [] and puller.stale()
    assert counted.reset() == {}
    # AND once CONTESTED_MS passed with no more sign of a rival, TRUST_MS again
    h.clock.advance(CONTESTED_MS / 1000)
    puller.learn(second)
    h.clock.advance(TRUST_CONTESTED_MS / 1000)
    assert [p["ticket"] for p in puller.take(1)] == [second["ticket"]]


def _order(h: Harness, salt: str, *, contested: bool) -> list[str]:
    puller = Puller(h.storage, h.queue.keys, h.clock, salt=salt)
    for payload in h.invocations:
        puller.learn(payload)
    if contested:
        puller.lost()
    return [str(p["ticket"]) for p in puller.take(len(h.invocations))]


def test_rivals_start_on_different_tickets_and_none_is_passed_by_spread_newer_ones() -> None:
    # GIVEN 24 pending tickets of one partition, oldest first
    h = Harness(settings=QueueSettings(batch_size=1, max_in_flight_tickets=24))
    for i in range(24):
        h.queue.enqueue(i)
    h.tick()
    oldest_first = sorted(str(p["ticket"]) for p in h.invocations)
    assert len(oldest_first) == 24
    # WHEN pullers with salts of their own hand them all out, contested or not
    orders = [_order(h, f"process-{n}", contested=True) for n in range(6)]
    # THEN uncontested, a puller takes them oldest first, as always
    assert _order(h, "process-0", contested=False) == oldest_first
    # AND contested, the pullers do not all start on the same one
    assert len({order[0] for order in orders}) > 1
    # AND no ticket is taken after one SPREAD or more places newer than it
    for order in orders:
        assert sorted(order) == oldest_first
        place = {key: oldest_first.index(key) for key in order}
        for at, key in enumerate(order):
            assert all(place[key] - place[later] < SPREAD for later in order[at + 1 :])
        assert order != oldest_first


class Keys:
    """A storage that records the key of every GET (which objects a worker read)."""

    def __init__(self, inner: Storage) -> None:
        self.inner = inner
        self.gets: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def get(self, key: str, **kwargs: Any) -> Any:
        self.gets.append(key)
        return self.inner.get(key, **kwargs)


def test_a_learnt_ticket_handed_out_while_contested_reads_no_window_before_its_claim() -> None:
    # GIVEN a ticket of four messages the leader's coordinator published, learnt by its puller
    h = Harness(settings=QueueSettings(batch_size=4))
    for i in range(4):
        h.queue.enqueue(i)
    h.tick()
    [payload] = h.invocations
    puller = Puller(h.storage, h.queue.keys, h.clock)
    puller.learn(payload)
    # WHEN the queue is contested, it is handed out, and another process claims it first
    puller.lost()
    [taken] = puller.take(1)
    loser = h.new_worker("w3")
    recorded = Keys(h.storage)
    loser.storage = recorded  # type: ignore[assignment]
    results: list[str] = []

    def handler(message: object) -> None:
        if not results:
            results.append(loser.process(taken, Recorder()).status)

    assert h.new_worker("w2").process(payload, handler).status == "committed"
    # THEN the loser read the lease, the first object (noted in its claim) and the ticket:
    # not the ticket's other objects ahead of a claim it was likely to lose
    assert results == ["busy"]
    assert taken["pulled"] and "pulled" not in payload  # the publisher's payload is unchanged
    messages = [key for key in recorded.gets if key.startswith(h.queue.keys.msg)]
    assert len(messages) == 1, recorded.gets


def test_the_runtime_tells_its_pull_loop_of_a_ticket_another_process_claimed() -> None:
    from s3queue.local.loader import load_handlers
    from s3queue.local.runtime import LOCAL_COORDINATION, _Runtime

    # GIVEN a worker-only runtime, and a ticket another process claims
    h = Harness(settings=QueueSettings(batch_size=1))
    h.queue.enqueue("x")
    h.tick()
    [payload] = h.invocations
    runtime = _Runtime(
        h.storage,
        load_handlers({QUEUE: lambda message: None}),
        prefix=h.queue.keys.prefix,
        workers=1,
        coordination=LOCAL_COORDINATION,
        listener=None,
        stop=threading.Event(),
        coordinate=False,
    )
    puller = runtime.pulling.pullers[QUEUE]
    contested: list[bool] = []

    def handler(message: object) -> None:
        # WHEN one of the runtime's threads is given it while the other process holds it
        runtime._process(payload)
        contested.append(puller.contested(puller.clock.now_ms()))

    assert not puller.contested(puller.clock.now_ms())
    assert h.new_worker("w2").process(payload, handler).status == "committed"
    # THEN its pull loop knows the queue is contested
    assert contested == [True]
