"""The dispatch gate: may this tick publish new tickets at all?

Flow control lives where dispatch happens: the leader is the one dispatcher of its queue, so
what it holds back is held back for every worker on every host (a pulling worker only claims
tickets the leader published). The queue's controls document (`s3queue.protocol.controls`)
lies beside the tickets, so the LIST of tickets that starts every tick shows its ETag: the
gate GETs it only when that ETag changed. A queue never paused costs no request more; a
``pause`` is honoured by the first tick of whichever coordinator leads (on Lambda or in a local
process) whose LIST of tickets began after the pause was written. A deployment's
``SETTINGS = {"paused": True}`` closes the gate too.

A closed gate stops only new tickets: the tick still reconciles (re-invokes, reaps, seals), so
tickets already out finish, and a reaped ticket's messages wait, undelivered and uncounted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from s3queue.contract.settings import QueueSettings
from s3queue.protocol.controls import Controls, read_controls
from s3queue.protocol.keys import QueueKeys
from s3queue.storage.base import Entry, Storage


@dataclass(slots=True)
class Gate:
    """The switches as of the last LIST of tickets; read again only when they changed."""

    storage: Storage
    keys: QueueKeys
    settings: QueueSettings
    controls: Controls = field(default_factory=Controls)
    etag: str | None = None
    """The ETag of the document `controls` was read from; None: there was none."""

    def observe(self, listed: list[Entry]) -> None:
        """Bring the switches up to what a LIST of tickets shows: a GET if their ETag changed."""
        etag = next((e.etag for e in listed if e.key == self.keys.controls), None)
        if etag == self.etag:
            return
        if etag is None:
            self.controls, self.etag = Controls(), None
            return
        self.controls, self.etag = read_controls(self.storage, self.keys.controls)

    @property
    def paused(self) -> bool:
        """Is dispatch paused, by the stored switch or by the settings?"""
        return self.settings.paused or self.controls.paused
