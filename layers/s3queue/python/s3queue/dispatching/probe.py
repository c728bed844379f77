"""The idle probe: is there any work in a queue, for the price of one LIST?

Apart from the coordinator's tick because it is what an idle queue costs per scheduled run: it
takes no lease and keeps no state, so a service can probe every queue and tick only the busy
ones. It reads the queue's live keys from `QueueKeys.live_start`, where ``inbox/``, ``msg/``,
``parts/`` and ``tickets/`` sort together.
"""

from __future__ import annotations

from s3queue.common.clock import Clock
from s3queue.protocol.keys import QueueKeys
from s3queue.storage.base import Entry, Storage

PROBE_PAGES = 3
"""LIST pages an idle probe reads past tombstones and retries in backoff before it gives up."""


def probe(storage: Storage, keys: QueueKeys, clock: Clock) -> bool:
    """Is there anything to do (inbox, ready messages in any partition, live tickets)? One
    LIST, or more when a full page of delayed messages hides what follows (at most
    `PROBE_PAGES`).

    Delayed messages alone are not work.
    """
    start = keys.live_start
    for _ in range(PROBE_PAGES):
        page = storage.list(keys.root, start_after=start)
        now = clock.now_ms()
        if any(_is_work(keys, entry, now) for entry in page.entries):
            return True
        if not page.truncated or not page.entries:
            return False
        owning = keys.owning(page.entries[-1].key)
        last = owning.parse_msg(page.entries[-1].key)
        if last is not None and last.sort_ms > now:
            # Keys sort by sort time, so every later key of this partition's folder is future
            # too (a retry in backoff may sort early, but never late): read on after it.
            start = owning.msg + "~"
        else:  # a page of tombstones, or of retries in backoff sorted in the past: read on
            start = page.entries[-1].key
    return True  # cannot tell within the budget: a tick will look


def _is_work(keys: QueueKeys, entry: Entry, now: int) -> bool:
    if entry.key == keys.controls:
        return False  # an operator's switches (controls.py), not work
    if entry.key.startswith((keys.inbox, keys.tickets)):
        return True
    owning = keys.owning(entry.key)
    if not entry.key.startswith(owning.msg) or keys.is_tombstone(entry.key, entry.size):
        return False  # no live work
    parsed = owning.parse_msg(entry.key)
    return parsed is None or parsed.ready_ms <= now
