"""A doubted ticket that landed and was claimed before the coordinator looked (issue 22 item 4's
soak, seed 1: found while testing the apply behind the worker; not caused by it).

The coordinator creates a ticket, the answer is lost (`_doubt`); a puller finds the ticket in
S3 and claims it; then the coordinator HEADs the ticket, takes the HEAD's ETag (the claimed
version's) as its pending version's, and invokes a worker with its pending copy and that ETag.
That worker's claim CAS then succeeds over the puller's claim: two holders of one generation,
and the messages run twice (the soak: `double_claim` and five `unexplained_duplicate`s).
Fixed in `Publisher._publish`: a HEAD whose token is not the create's is a version written
since; the ticket is left to the next tick to learn, and no worker is invoked with the copy.
"""

from __future__ import annotations

from typing import Any

from harness import Harness, Recorder
from s3queue.errors import StorageError
from s3queue.protocol.tickets import Ticket
from s3queue.storage import MemoryStorage
from s3queue.working.claim import Claim
from s3queue.working.pull import Puller


class LostAnswer(MemoryStorage):
    """The first ticket create lands, a puller claims it, then the create's answer is lost."""

    def __init__(self) -> None:
        super().__init__()
        self.h: Harness | None = None
        self.claimed: list[str] = []

    def put(self, key: str, body: bytes, **kwargs: Any) -> str:
        etag = super().put(key, body, **kwargs)
        if not self.claimed and "/tickets/" in key and kwargs.get("if_none_match"):
            assert self.h is not None
            [payload] = Puller(self, self.h.queue.keys).poll(1)
            ticket = Ticket.decode(payload["doc"]) if payload.get("doc") else payload["held"]
            claim = Claim(self.h.new_worker("puller"), key, ticket.copy(), payload["etag"])
            claim.take("puller", None)  # its handler runs now
            self.claimed.append(key)
            raise StorageError("answer lost")
        return etag


def test_a_doubted_ticket_claimed_before_the_coordinator_looked_is_not_claimed_twice() -> None:
    storage = LostAnswer()
    h = Harness(storage=storage)
    storage.h = h
    h.queue.enqueue("x")
    # WHEN the coordinator publishes (the puller claims it meanwhile, then the create's answer
    # is lost and the coordinator's HEAD finds a version that is not its own)
    h.tick()
    assert storage.claimed
    # THEN no worker claims it over the puller's claim: none is invoked with the stale copy
    results = h.work(Recorder())
    assert all(r.status != "committed" for r in results), [r.status for r in results]
    assert not [e for e in h.events if e.kind == "claim" and e.fields.get("owner") != "puller"]
    # AND the next tick learns it as it is (claimed: nothing to invoke)
    h.tick()
    assert not h.invocations
